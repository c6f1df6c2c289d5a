// A ReLU then a convolution, the batch size left to the run: the convolution's computed input has a
// dynamic size, which a barrier placed in front of it has to carry.
func.func @main(%input: tensor<?x8x18x18xf32>, %filter: tensor<16x8x3x3xf32>) -> tensor<?x16x16x16xf32> {
  %zero = arith.constant 0.0 : f32
  %c0 = arith.constant 0 : index
  %batch = tensor.dim %input, %c0 : tensor<?x8x18x18xf32>
  %relu_empty = tensor.empty(%batch) : tensor<?x8x18x18xf32>
  %relu = linalg.generic {indexing_maps = [affine_map<(n, c, h, w) -> (n, c, h, w)>, affine_map<(n, c, h, w) -> (n, c, h, w)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%input : tensor<?x8x18x18xf32>) outs(%relu_empty : tensor<?x8x18x18xf32>) {
  ^bb0(%x: f32, %o: f32):
    %r = arith.maximumf %x, %zero : f32
    linalg.yield %r : f32
  } -> tensor<?x8x18x18xf32>
  %empty = tensor.empty(%batch) : tensor<?x16x16x16xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<?x16x16x16xf32>) -> tensor<?x16x16x16xf32>
  %conv = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%relu, %filter : tensor<?x8x18x18xf32>, tensor<16x8x3x3xf32>) outs(%init : tensor<?x16x16x16xf32>) -> tensor<?x16x16x16xf32>
  return %conv : tensor<?x16x16x16xf32>
}
