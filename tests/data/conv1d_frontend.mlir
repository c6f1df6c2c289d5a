// An audio front end in miniature (as Wav2Vec2's feature extractor): two strided NCW 1-D convolutions,
// the first on the raw signal, the second over 64 channels, a ReLU between them; filters as arguments.
func.func @main(%signal: tensor<1x1x8000xf32>, %first_filter: tensor<64x1x10xf32>, %second_filter: tensor<64x64x3xf32>) -> tensor<1x64x798xf32> {
  %zero = arith.constant 0.0 : f32
  %first_empty = tensor.empty() : tensor<1x64x1599xf32>
  %first_init = linalg.fill ins(%zero : f32) outs(%first_empty : tensor<1x64x1599xf32>) -> tensor<1x64x1599xf32>
  %first = linalg.conv_1d_ncw_fcw {dilations = dense<1> : tensor<1xi64>, strides = dense<5> : tensor<1xi64>} ins(%signal, %first_filter : tensor<1x1x8000xf32>, tensor<64x1x10xf32>) outs(%first_init : tensor<1x64x1599xf32>) -> tensor<1x64x1599xf32>
  %relu = linalg.generic {indexing_maps = [affine_map<(n, c, w) -> (n, c, w)>, affine_map<(n, c, w) -> (n, c, w)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%first : tensor<1x64x1599xf32>) outs(%first_empty : tensor<1x64x1599xf32>) {
  ^bb0(%x: f32, %o: f32):
    %r = arith.maximumf %x, %zero : f32
    linalg.yield %r : f32
  } -> tensor<1x64x1599xf32>
  %second_empty = tensor.empty() : tensor<1x64x798xf32>
  %second_init = linalg.fill ins(%zero : f32) outs(%second_empty : tensor<1x64x798xf32>) -> tensor<1x64x798xf32>
  %second = linalg.conv_1d_ncw_fcw {dilations = dense<1> : tensor<1xi64>, strides = dense<2> : tensor<1xi64>} ins(%relu, %second_filter : tensor<1x64x1599xf32>, tensor<64x64x3xf32>) outs(%second_init : tensor<1x64x798xf32>) -> tensor<1x64x798xf32>
  return %second : tensor<1x64x798xf32>
}
