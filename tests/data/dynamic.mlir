// Dynamic shapes: the rows of %a are dynamic (fixed by the input the run is given), and %rows, a
// tensor value, chooses how many of them the second dispatch scales (fixed only by data).
func.func @main(%a: tensor<?x256xf32>, %b: tensor<256x128xf32>, %rows: tensor<i64>) -> (tensor<?x128xf32>, tensor<?x256xf32>) {
  %c0 = arith.constant 0 : index
  %m = tensor.dim %a, %c0 : tensor<?x256xf32>
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty(%m) : tensor<?x128xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<?x128xf32>) -> tensor<?x128xf32>
  %product = linalg.matmul ins(%a, %b : tensor<?x256xf32>, tensor<256x128xf32>) outs(%init : tensor<?x128xf32>) -> tensor<?x128xf32>
  %exp = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%product : tensor<?x128xf32>) outs(%empty : tensor<?x128xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = math.exp %x : f32
    linalg.yield %y : f32
  } -> tensor<?x128xf32>
  %n = tensor.extract %rows[] : tensor<i64>
  %k = arith.index_cast %n : i64 to index
  %part = tensor.extract_slice %a[0, 0] [%k, 256] [1, 1] : tensor<?x256xf32> to tensor<?x256xf32>
  %scaled_empty = tensor.empty(%k) : tensor<?x256xf32>
  %scaled = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%part : tensor<?x256xf32>) outs(%scaled_empty : tensor<?x256xf32>) {
  ^bb0(%x: f32, %o: f32):
    %two = arith.constant 2.0 : f32
    %y = arith.mulf %x, %two : f32
    %z = arith.addf %y, %x : f32
    linalg.yield %z : f32
  } -> tensor<?x256xf32>
  return %exp, %scaled : tensor<?x128xf32>, tensor<?x256xf32>
}
