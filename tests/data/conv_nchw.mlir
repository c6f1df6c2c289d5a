// An NCHW convolution whose filter is an argument (random values at run time, nothing for the compiler
// to fold), and an elementwise pass over another input in a dispatch of its own that no convolution
// strategy changes.
func.func @main(%input: tensor<1x16x28x28xf32>, %filter: tensor<32x16x3x3xf32>, %other: tensor<512x512xf32>) -> (tensor<1x32x26x26xf32>, tensor<512x512xf32>) {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<1x32x26x26xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<1x32x26x26xf32>) -> tensor<1x32x26x26xf32>
  %conv = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%input, %filter : tensor<1x16x28x28xf32>, tensor<32x16x3x3xf32>) outs(%init : tensor<1x32x26x26xf32>) -> tensor<1x32x26x26xf32>
  %other_empty = tensor.empty() : tensor<512x512xf32>
  %exps = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]} ins(%other : tensor<512x512xf32>) outs(%other_empty : tensor<512x512xf32>) {
  ^bb0(%x: f32, %o: f32):
    %e = math.exp %x : f32
    %t = math.tanh %e : f32
    linalg.yield %t : f32
  } -> tensor<512x512xf32>
  return %conv, %exps : tensor<1x32x26x26xf32>, tensor<512x512xf32>
}
