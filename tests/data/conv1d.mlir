// The 1-D convolution forms IREE's importers produce, in a row (filters as arguments: nothing to fold):
// NCW with stride 2 and a bias, NWC, depthwise NCW with dilation 2; a conv1d-as-conv2d rewrite turns
// each into the 2-D op on a height-1 view.
func.func @main(%input: tensor<1x4x64xf32>, %first_filter: tensor<8x4x5xf32>, %bias: tensor<8xf32>,
                %second_filter: tensor<3x8x8xf32>, %depthwise_filter: tensor<8x3xf32>) -> tensor<1x8x24xf32> {
  %zero = arith.constant 0.0 : f32
  %first_empty = tensor.empty() : tensor<1x8x30xf32>
  %first_init = linalg.generic {indexing_maps = [affine_map<(n, c, w) -> (c)>, affine_map<(n, c, w) -> (n, c, w)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%bias : tensor<8xf32>) outs(%first_empty : tensor<1x8x30xf32>) {
  ^bb0(%b: f32, %o: f32):
    linalg.yield %b : f32
  } -> tensor<1x8x30xf32>
  %first = linalg.conv_1d_ncw_fcw {dilations = dense<1> : tensor<1xi64>, strides = dense<2> : tensor<1xi64>} ins(%input, %first_filter : tensor<1x4x64xf32>, tensor<8x4x5xf32>) outs(%first_init : tensor<1x8x30xf32>) -> tensor<1x8x30xf32>
  %nwc_empty = tensor.empty() : tensor<1x30x8xf32>
  %nwc = linalg.transpose ins(%first : tensor<1x8x30xf32>) outs(%nwc_empty : tensor<1x30x8xf32>) permutation = [0, 2, 1]
  %second_empty = tensor.empty() : tensor<1x28x8xf32>
  %second_init = linalg.fill ins(%zero : f32) outs(%second_empty : tensor<1x28x8xf32>) -> tensor<1x28x8xf32>
  %second = linalg.conv_1d_nwc_wcf {dilations = dense<1> : tensor<1xi64>, strides = dense<1> : tensor<1xi64>} ins(%nwc, %second_filter : tensor<1x30x8xf32>, tensor<3x8x8xf32>) outs(%second_init : tensor<1x28x8xf32>) -> tensor<1x28x8xf32>
  %ncw_empty = tensor.empty() : tensor<1x8x28xf32>
  %ncw = linalg.transpose ins(%second : tensor<1x28x8xf32>) outs(%ncw_empty : tensor<1x8x28xf32>) permutation = [0, 2, 1]
  %depthwise_empty = tensor.empty() : tensor<1x8x24xf32>
  %depthwise_init = linalg.fill ins(%zero : f32) outs(%depthwise_empty : tensor<1x8x24xf32>) -> tensor<1x8x24xf32>
  %depthwise = linalg.depthwise_conv_1d_ncw_cw {dilations = dense<2> : tensor<1xi64>, strides = dense<1> : tensor<1xi64>} ins(%ncw, %depthwise_filter : tensor<1x8x28xf32>, tensor<8x3xf32>) outs(%depthwise_init : tensor<1x8x24xf32>) -> tensor<1x8x24xf32>
  return %depthwise : tensor<1x8x24xf32>
}
