// A ViT's patch embedding in miniature: 4x4 patches of a 3-channel 32x32 image (strides equal to the
// kernel), with a bias, then a 2x2 convolution with stride 1 (overlapping windows: not a patch embedding).
func.func @main(%image: tensor<1x3x32x32xf32>, %patch_filter: tensor<16x3x4x4xf32>, %bias: tensor<16xf32>,
                %filter: tensor<8x16x2x2xf32>) -> tensor<1x8x7x7xf32> {
  %zero = arith.constant 0.0 : f32
  %patch_empty = tensor.empty() : tensor<1x16x8x8xf32>
  %patch_init = linalg.generic {indexing_maps = [affine_map<(n, c, h, w) -> (c)>, affine_map<(n, c, h, w) -> (n, c, h, w)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%bias : tensor<16xf32>) outs(%patch_empty : tensor<1x16x8x8xf32>) {
  ^bb0(%b: f32, %o: f32):
    linalg.yield %b : f32
  } -> tensor<1x16x8x8xf32>
  %patches = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<4> : tensor<2xi64>} ins(%image, %patch_filter : tensor<1x3x32x32xf32>, tensor<16x3x4x4xf32>) outs(%patch_init : tensor<1x16x8x8xf32>) -> tensor<1x16x8x8xf32>
  %empty = tensor.empty() : tensor<1x8x7x7xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<1x8x7x7xf32>) -> tensor<1x8x7x7xf32>
  %out = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%patches, %filter : tensor<1x16x8x8xf32>, tensor<8x16x2x2xf32>) outs(%init : tensor<1x8x7x7xf32>) -> tensor<1x8x7x7xf32>
  return %out : tensor<1x8x7x7xf32>
}
