// Attention as PyTorch's importer gives IREE its scaled_dot_product_attention (one batch dimension: batch
// and heads collapsed): with a boolean mask, with an additive float mask, without a mask, and one whose
// score region changes the score, which attention-as-matmuls leaves alone.
#q = affine_map<(b, m, k2, k1, n) -> (b, m, k1)>
#k = affine_map<(b, m, k2, k1, n) -> (b, n, k1)>
#v = affine_map<(b, m, k2, k1, n) -> (b, n, k2)>
#s = affine_map<(b, m, k2, k1, n) -> ()>
#mask = affine_map<(b, m, k2, k1, n) -> (b, m, n)>
#o = affine_map<(b, m, k2, k1, n) -> (b, m, k2)>
#id = affine_map<(b, m, n) -> (b, m, n)>
func.func @main(%query: tensor<2x10x8xf32>, %key: tensor<2x12x8xf32>, %value: tensor<2x12x6xf32>, %bias: tensor<2x10x12xf32>)
    -> (tensor<2x10x6xf32>, tensor<2x10x6xf32>, tensor<2x10x6xf32>, tensor<2x10x6xf32>) {
  %scale = arith.constant 0.35 : f32
  %cut = arith.constant -0.5 : f32
  %bools = tensor.empty() : tensor<2x10x12xi1>
  %keep = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%bias : tensor<2x10x12xf32>) outs(%bools : tensor<2x10x12xi1>) {
  ^bb0(%b: f32, %unused: i1):
    %above = arith.cmpf ogt, %b, %cut : f32
    linalg.yield %above : i1
  } -> tensor<2x10x12xi1>
  %empty = tensor.empty() : tensor<2x10x6xf32>
  %masked = iree_linalg_ext.attention <indexing_maps = [#q, #k, #v, #s, #mask, #o]> ins(%query, %key, %value, %scale, %keep : tensor<2x10x8xf32>, tensor<2x12x8xf32>, tensor<2x12x6xf32>, f32, tensor<2x10x12xi1>) outs(%empty : tensor<2x10x6xf32>) {
  ^bb0(%score: f32):
    iree_linalg_ext.yield %score : f32
  } -> tensor<2x10x6xf32>
  %biased = iree_linalg_ext.attention <indexing_maps = [#q, #k, #v, #s, #mask, #o]> ins(%query, %key, %value, %scale, %bias : tensor<2x10x8xf32>, tensor<2x12x8xf32>, tensor<2x12x6xf32>, f32, tensor<2x10x12xf32>) outs(%empty : tensor<2x10x6xf32>) {
  ^bb0(%score: f32):
    iree_linalg_ext.yield %score : f32
  } -> tensor<2x10x6xf32>
  %plain = iree_linalg_ext.attention <indexing_maps = [#q, #k, #v, #s, #o]> ins(%query, %key, %value, %scale : tensor<2x10x8xf32>, tensor<2x12x8xf32>, tensor<2x12x6xf32>, f32) outs(%empty : tensor<2x10x6xf32>) {
  ^bb0(%score: f32):
    iree_linalg_ext.yield %score : f32
  } -> tensor<2x10x6xf32>
  %capped = iree_linalg_ext.attention <indexing_maps = [#q, #k, #v, #s, #o]> ins(%query, %key, %value, %scale : tensor<2x10x8xf32>, tensor<2x12x8xf32>, tensor<2x12x6xf32>, f32) outs(%empty : tensor<2x10x6xf32>) {
  ^bb0(%score: f32):
    %half = arith.mulf %score, %scale : f32
    iree_linalg_ext.yield %half : f32
  } -> tensor<2x10x6xf32>
  return %masked, %biased, %plain, %capped : tensor<2x10x6xf32>, tensor<2x10x6xf32>, tensor<2x10x6xf32>, tensor<2x10x6xf32>
}
