// One self-attention block (single head, sequence 64, model width 128): projections,
// transposed keys, scaled scores, softmax, weighted values, output projection and a
// residual connection. Locations name the layer and the line of attention.py that built it.
#id = affine_map<(i, j) -> (i, j)>
func.func @attention(%x: tensor<64x128xf32>, %wq: tensor<128x64xf32>, %wk: tensor<128x64xf32>,
                     %wv: tensor<128x64xf32>, %wo: tensor<64x128xf32>) -> tensor<64x128xf32> {
  %zero = arith.constant 0.0 : f32
  %scale = arith.constant 0.125 : f32
  %e_proj = tensor.empty() : tensor<64x64xf32>
  %z_proj = linalg.fill ins(%zero : f32) outs(%e_proj : tensor<64x64xf32>) -> tensor<64x64xf32>

  %q = linalg.matmul ins(%x, %wq : tensor<64x128xf32>, tensor<128x64xf32>) outs(%z_proj : tensor<64x64xf32>) -> tensor<64x64xf32> loc("attn.q_proj"("attention.py":21:12))
  %k = linalg.matmul ins(%x, %wk : tensor<64x128xf32>, tensor<128x64xf32>) outs(%z_proj : tensor<64x64xf32>) -> tensor<64x64xf32> loc("attn.k_proj"("attention.py":22:12))
  %v = linalg.matmul ins(%x, %wv : tensor<64x128xf32>, tensor<128x64xf32>) outs(%z_proj : tensor<64x64xf32>) -> tensor<64x64xf32> loc("attn.v_proj"("attention.py":23:12))

  %e_kt = tensor.empty() : tensor<64x64xf32>
  %kt = linalg.transpose ins(%k : tensor<64x64xf32>) outs(%e_kt : tensor<64x64xf32>) permutation = [1, 0] loc("attn.k_transpose"("attention.py":25:19))
  %scores = linalg.matmul ins(%q, %kt : tensor<64x64xf32>, tensor<64x64xf32>) outs(%z_proj : tensor<64x64xf32>) -> tensor<64x64xf32> loc("attn.scores"("attention.py":25:17))
  %scaled = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%scores : tensor<64x64xf32>) outs(%e_proj : tensor<64x64xf32>) {
  ^bb0(%s: f32, %o: f32):
    %m = arith.mulf %s, %scale : f32 loc("attn.scale"("attention.py":26:17))
    linalg.yield %m : f32
  } -> tensor<64x64xf32> loc("attn.scale"("attention.py":26:17))
  %e_p = tensor.empty() : tensor<64x64xf32>
  %p = linalg.softmax dimension(1) ins(%scaled : tensor<64x64xf32>) outs(%e_p : tensor<64x64xf32>) -> tensor<64x64xf32> loc("attn.softmax"("attention.py":27:12))
  %ctx = linalg.matmul ins(%p, %v : tensor<64x64xf32>, tensor<64x64xf32>) outs(%z_proj : tensor<64x64xf32>) -> tensor<64x64xf32> loc("attn.context"("attention.py":28:14))

  %e_out = tensor.empty() : tensor<64x128xf32>
  %z_out = linalg.fill ins(%zero : f32) outs(%e_out : tensor<64x128xf32>) -> tensor<64x128xf32>
  %proj = linalg.matmul ins(%ctx, %wo : tensor<64x64xf32>, tensor<64x128xf32>) outs(%z_out : tensor<64x128xf32>) -> tensor<64x128xf32> loc("attn.out_proj"("attention.py":29:14))
  %y = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%proj, %x : tensor<64x128xf32>, tensor<64x128xf32>) outs(%e_out : tensor<64x128xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32 loc("attn.residual"("attention.py":30:16))
    linalg.yield %r : f32
  } -> tensor<64x128xf32> loc("attn.residual"("attention.py":30:16))
  return %y : tensor<64x128xf32>
}
