// Grouped convolutions as PyTorch's importer gives them: a strided, dilated grouped 1-D convolution on a
// width-1 view (gfchw, as Wav2Vec2's positional convolution), then a grouped 3x3 one (fgchw) on its result.
func.func @main(%signal: tensor<1x4x3x1x40xf32>, %filter: tensor<4x3x3x1x8xf32>, %filter2: tensor<5x4x3x3x3xf32>) -> tensor<1x4x5x1x9xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<1x4x3x1x13xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<1x4x3x1x13xf32>) -> tensor<1x4x3x1x13xf32>
  %first = linalg.conv_2d_ngchw_gfchw {dilations = dense<[1, 2]> : tensor<2xi64>, strides = dense<[1, 2]> : tensor<2xi64>} ins(%signal, %filter : tensor<1x4x3x1x40xf32>, tensor<4x3x3x1x8xf32>) outs(%init : tensor<1x4x3x1x13xf32>) -> tensor<1x4x3x1x13xf32>
  %padded = tensor.pad %first low[0, 0, 0, 1, 0] high[0, 0, 0, 1, 0] {
  ^bb0(%a: index, %b: index, %c: index, %d: index, %e: index):
    tensor.yield %zero : f32
  } : tensor<1x4x3x1x13xf32> to tensor<1x4x3x3x13xf32>
  %empty2 = tensor.empty() : tensor<1x4x5x1x11xf32>
  %init2 = linalg.fill ins(%zero : f32) outs(%empty2 : tensor<1x4x5x1x11xf32>) -> tensor<1x4x5x1x11xf32>
  %second = linalg.conv_2d_ngchw_fgchw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%padded, %filter2 : tensor<1x4x3x3x13xf32>, tensor<5x4x3x3x3xf32>) outs(%init2 : tensor<1x4x5x1x11xf32>) -> tensor<1x4x5x1x11xf32>
  %out = tensor.extract_slice %second[0, 0, 0, 0, 1] [1, 4, 5, 1, 9] [1, 1, 1, 1, 1] : tensor<1x4x5x1x11xf32> to tensor<1x4x5x1x9xf32>
  return %out : tensor<1x4x5x1x9xf32>
}
