// A 3-layer MLP as a framework would export it: every op carries the name of the layer
// that created it and the Python line it came from (model.py is not in this repo; the
// locations are what matter).
#id = affine_map<(i, j) -> (i, j)>
#row = affine_map<(i, j) -> (j)>
func.func @main(%x: tensor<32x256xf32>,
                %w1: tensor<256x512xf32>, %b1: tensor<512xf32>,
                %w2: tensor<512x256xf32>, %b2: tensor<256xf32>,
                %w3: tensor<256x10xf32>) -> tensor<32x10xf32> {
  %zero = arith.constant 0.0 : f32

  %e1 = tensor.empty() : tensor<32x512xf32>
  %z1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<32x512xf32>) -> tensor<32x512xf32> loc("layer1.fc"("model.py":10:12))
  %m1 = linalg.matmul ins(%x, %w1 : tensor<32x256xf32>, tensor<256x512xf32>) outs(%z1 : tensor<32x512xf32>) -> tensor<32x512xf32> loc("layer1.fc"("model.py":10:12))
  %h1 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%m1, %b1 : tensor<32x512xf32>, tensor<512xf32>) outs(%e1 : tensor<32x512xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32 loc("layer1.bias"("model.py":11:12))
    %r = arith.maximumf %s, %zero : f32 loc("layer1.relu"("model.py":12:12))
    linalg.yield %r : f32
  } -> tensor<32x512xf32> loc("layer1.relu"("model.py":12:12))

  %e2 = tensor.empty() : tensor<32x256xf32>
  %z2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<32x256xf32>) -> tensor<32x256xf32> loc("layer2.fc"("model.py":14:12))
  %m2 = linalg.matmul ins(%h1, %w2 : tensor<32x512xf32>, tensor<512x256xf32>) outs(%z2 : tensor<32x256xf32>) -> tensor<32x256xf32> loc("layer2.fc"("model.py":14:12))
  %h2 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%m2, %b2 : tensor<32x256xf32>, tensor<256xf32>) outs(%e2 : tensor<32x256xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32 loc("layer2.bias"("model.py":15:12))
    %r = arith.maximumf %s, %zero : f32 loc("layer2.relu"("model.py":16:12))
    linalg.yield %r : f32
  } -> tensor<32x256xf32> loc("layer2.relu"("model.py":16:12))

  %e3 = tensor.empty() : tensor<32x10xf32>
  %z3 = linalg.fill ins(%zero : f32) outs(%e3 : tensor<32x10xf32>) -> tensor<32x10xf32> loc("head.fc"("model.py":18:16))
  %logits = linalg.matmul ins(%h2, %w3 : tensor<32x256xf32>, tensor<256x10xf32>) outs(%z3 : tensor<32x10xf32>) -> tensor<32x10xf32> loc("head.fc"("model.py":18:16))
  return %logits : tensor<32x10xf32>
}
