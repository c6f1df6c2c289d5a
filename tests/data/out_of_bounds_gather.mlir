// Reads the table at indices from the input: an index far past the table faults.
func.func @main(%table: tensor<16xf32>, %indices: tensor<4xi64>) -> tensor<4xf32> {
  %empty = tensor.empty() : tensor<4xf32>
  %gathered = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%indices : tensor<4xi64>) outs(%empty : tensor<4xf32>) {
  ^bb0(%index: i64, %unused: f32):
    %position = arith.index_cast %index : i64 to index
    %value = tensor.extract %table[%position] : tensor<16xf32>
    linalg.yield %value : f32
  } -> tensor<4xf32>
  return %gathered : tensor<4xf32>
}
