// Three dispatches with multi-workgroup grids for the hook tests (tests/test_hook.py):
// a matmul, a transpose+bias+tanh fused into a second matmul, and a row reduction.
func.func @main(%a: tensor<256x256xf32>, %b: tensor<256x256xf32>, %bias: tensor<256xf32>) -> tensor<256xf32> {
  %cst = arith.constant 0.0 : f32
  %z = tensor.empty() : tensor<256x256xf32>
  %f = linalg.fill ins(%cst : f32) outs(%z : tensor<256x256xf32>) -> tensor<256x256xf32>
  %m = linalg.matmul ins(%a, %b : tensor<256x256xf32>, tensor<256x256xf32>) outs(%f : tensor<256x256xf32>) -> tensor<256x256xf32>
  %e = tensor.empty() : tensor<256x256xf32>
  %t = linalg.generic {indexing_maps = [affine_map<(i, j) -> (j, i)>, affine_map<(i, j) -> (j)>, affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%m, %bias : tensor<256x256xf32>, tensor<256xf32>) outs(%e : tensor<256x256xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    %th = math.tanh %s : f32
    linalg.yield %th : f32
  } -> tensor<256x256xf32>
  %m2 = linalg.matmul ins(%t, %b : tensor<256x256xf32>, tensor<256x256xf32>) outs(%f : tensor<256x256xf32>) -> tensor<256x256xf32>
  %r0 = tensor.empty() : tensor<256xf32>
  %rf = linalg.fill ins(%cst : f32) outs(%r0 : tensor<256xf32>) -> tensor<256xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>],
                       iterator_types = ["parallel", "reduction"]}
      ins(%m2 : tensor<256x256xf32>) outs(%rf : tensor<256xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = arith.addf %x, %o : f32
    linalg.yield %s : f32
  } -> tensor<256xf32>
  return %r : tensor<256xf32>
}
