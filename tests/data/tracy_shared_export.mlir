// A constant computed at load time by the same dispatch as a run-phase op (compile with
// --iree-opt-const-eval=false): tanh of a constant is hoisted into an initializer, and tanh of the
// input is the same executable, so the initializer and the run phase share one export.
#map = affine_map<(i) -> (i)>
func.func @main(%x: tensor<64xf32>, %y: tensor<16x4xf32>) -> (tensor<64xf32>, tensor<4x4xf32>) {
  %c = arith.constant dense<[-1.0, -0.2292, 0.5417, -0.7083, 0.0625, 0.8333, -0.4167, 0.3542, -0.8958, -0.125, 0.6458, -0.6042, 0.1667, 0.9375, -0.3125, 0.4583, -0.7917, -0.0208, 0.75, -0.5, 0.2708, -0.9792, -0.2083, 0.5625, -0.6875, 0.0833, 0.8542, -0.3958, 0.375, -0.875, -0.1042, 0.6667, -0.5833, 0.1875, 0.9583, -0.2917, 0.4792, -0.7708, 0.0, 0.7708, -0.4792, 0.2917, -0.9583, -0.1875, 0.5833, -0.6667, 0.1042, 0.875, -0.375, 0.3958, -0.8542, -0.0833, 0.6875, -0.5625, 0.2083, 0.9792, -0.2708, 0.5, -0.75, 0.0208, 0.7917, -0.4583, 0.3125, -0.9375]> : tensor<64xf32>
  %e0 = tensor.empty() : tensor<64xf32>
  %tc = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%c : tensor<64xf32>) outs(%e0 : tensor<64xf32>) {
  ^bb0(%a: f32, %o: f32):
    %t = math.tanh %a : f32
    linalg.yield %t : f32
  } -> tensor<64xf32>
  %e1 = tensor.empty() : tensor<64xf32>
  %tx = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%x : tensor<64xf32>) outs(%e1 : tensor<64xf32>) {
  ^bb0(%a: f32, %o: f32):
    %t = math.tanh %a : f32
    linalg.yield %t : f32
  } -> tensor<64xf32>
  %w = tensor.expand_shape %tc [[0, 1]] output_shape [4, 16] : tensor<64xf32> into tensor<4x16xf32>
  %zero = arith.constant 0.0 : f32
  %e2 = tensor.empty() : tensor<4x4xf32>
  %fill = linalg.fill ins(%zero : f32) outs(%e2 : tensor<4x4xf32>) -> tensor<4x4xf32>
  %mm = linalg.matmul ins(%w, %y : tensor<4x16xf32>, tensor<16x4xf32>) outs(%fill : tensor<4x4xf32>) -> tensor<4x4xf32>
  return %tx, %mm : tensor<64xf32>, tensor<4x4xf32>
}
