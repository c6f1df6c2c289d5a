// A matmul-heavy two-layer MLP block (512x512 activations, f32): each layer is
// a 512^3 matmul, a bias add and a relu. The matmuls dominate the run time, which
// makes this the example for `tracelink tune`.
//
//   tracelink profile examples/matmul_heavy.mlir -o out/base
//   tracelink tune out/base --config examples/tune.toml -o out/spec.mlir
//   tracelink profile examples/matmul_heavy.mlir --tuning-spec out/spec.mlir -o out/tuned
//   tracelink diff out/base out/tuned
#bias_map = affine_map<(d0, d1) -> (d1)>
#id_map = affine_map<(d0, d1) -> (d0, d1)>
func.func @main(%x: tensor<512x512xf32>, %w1: tensor<512x512xf32>, %b1: tensor<512xf32>,
                %w2: tensor<512x512xf32>, %b2: tensor<512xf32>) -> tensor<512x512xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<512x512xf32>
  %acc1 = linalg.fill ins(%zero : f32) outs(%empty : tensor<512x512xf32>) -> tensor<512x512xf32> loc("layer1.fc"("model.py":12:9))
  %mm1 = linalg.matmul ins(%x, %w1 : tensor<512x512xf32>, tensor<512x512xf32>)
                       outs(%acc1 : tensor<512x512xf32>) -> tensor<512x512xf32> loc("layer1.fc"("model.py":12:9))
  %h1 = linalg.generic {indexing_maps = [#id_map, #bias_map, #id_map], iterator_types = ["parallel", "parallel"]}
      ins(%mm1, %b1 : tensor<512x512xf32>, tensor<512xf32>) outs(%empty : tensor<512x512xf32>) {
  ^bb0(%v: f32, %b: f32, %out: f32):
    %s = arith.addf %v, %b : f32 loc("layer1.bias"("model.py":12:9))
    %r = arith.maximumf %s, %zero : f32 loc("layer1.relu"("model.py":13:9))
    linalg.yield %r : f32
  } -> tensor<512x512xf32> loc("layer1.relu"("model.py":13:9))
  %acc2 = linalg.fill ins(%zero : f32) outs(%empty : tensor<512x512xf32>) -> tensor<512x512xf32> loc("layer2.fc"("model.py":14:9))
  %mm2 = linalg.matmul ins(%h1, %w2 : tensor<512x512xf32>, tensor<512x512xf32>)
                       outs(%acc2 : tensor<512x512xf32>) -> tensor<512x512xf32> loc("layer2.fc"("model.py":14:9))
  %h2 = linalg.generic {indexing_maps = [#id_map, #bias_map, #id_map], iterator_types = ["parallel", "parallel"]}
      ins(%mm2, %b2 : tensor<512x512xf32>, tensor<512xf32>) outs(%empty : tensor<512x512xf32>) {
  ^bb0(%v: f32, %b: f32, %out: f32):
    %s = arith.addf %v, %b : f32 loc("layer2.bias"("model.py":14:9))
    %r = arith.maximumf %s, %zero : f32 loc("layer2.relu"("model.py":15:9))
    linalg.yield %r : f32
  } -> tensor<512x512xf32> loc("layer2.relu"("model.py":15:9))
  return %h2 : tensor<512x512xf32>
}
