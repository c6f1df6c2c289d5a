// Two NCHW convolutions in a row, the first followed by a ReLU, filters as arguments (nothing for the
// compiler to fold): a per-op composition converts one of them and leaves the other.
func.func @main(%input: tensor<1x8x18x18xf32>, %first_filter: tensor<16x8x3x3xf32>, %second_filter: tensor<16x16x3x3xf32>) -> tensor<1x16x14x14xf32> {
  %zero = arith.constant 0.0 : f32
  %first_empty = tensor.empty() : tensor<1x16x16x16xf32>
  %first_init = linalg.fill ins(%zero : f32) outs(%first_empty : tensor<1x16x16x16xf32>) -> tensor<1x16x16x16xf32>
  %first = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%input, %first_filter : tensor<1x8x18x18xf32>, tensor<16x8x3x3xf32>) outs(%first_init : tensor<1x16x16x16xf32>) -> tensor<1x16x16x16xf32>
  %relu = linalg.generic {indexing_maps = [affine_map<(n, c, h, w) -> (n, c, h, w)>, affine_map<(n, c, h, w) -> (n, c, h, w)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%first : tensor<1x16x16x16xf32>) outs(%first_empty : tensor<1x16x16x16xf32>) {
  ^bb0(%x: f32, %o: f32):
    %r = arith.maximumf %x, %zero : f32
    linalg.yield %r : f32
  } -> tensor<1x16x16x16xf32>
  %second_empty = tensor.empty() : tensor<1x16x14x14xf32>
  %second_init = linalg.fill ins(%zero : f32) outs(%second_empty : tensor<1x16x14x14xf32>) -> tensor<1x16x14x14xf32>
  %second = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%relu, %second_filter : tensor<1x16x16x16xf32>, tensor<16x16x3x3xf32>) outs(%second_init : tensor<1x16x14x14xf32>) -> tensor<1x16x14x14xf32>
  return %second : tensor<1x16x14x14xf32>
}
