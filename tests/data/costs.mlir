func.func @main(%a: tensor<64x128xf32>, %b: tensor<128x256xf32>, %ba: tensor<4x32x64xf32>, %bb: tensor<4x64x16xf32>,
                %img: tensor<1x18x18x8xf32>, %flt: tensor<3x3x8x16xf32>, %x: tensor<64x128xf32>, %y: tensor<64x128xf32>,
                %big: tensor<4194304xf32>, %sm: tensor<32x100xf32>, %aq: tensor<2x64x32xf32>, %ak: tensor<2x48x32xf32>, %av: tensor<2x48x16xf32>, %ds: tensor<1x64x56x56xf32>)
    -> (tensor<64x256xf32>, tensor<4x32x16xf32>, tensor<1x16x16x16xf32>, tensor<64x128xf32>, tensor<f32>, tensor<32x100xf32>, tensor<2x64x16xf32>, tensor<1x128x28x28xf32>) {
  %zero = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<64x256xf32>
  %f0 = linalg.fill ins(%zero : f32) outs(%e0 : tensor<64x256xf32>) -> tensor<64x256xf32>
  %mm = linalg.matmul ins(%a, %b : tensor<64x128xf32>, tensor<128x256xf32>) outs(%f0 : tensor<64x256xf32>) -> tensor<64x256xf32>
  %e1 = tensor.empty() : tensor<4x32x16xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<4x32x16xf32>) -> tensor<4x32x16xf32>
  %bmm = linalg.batch_matmul ins(%ba, %bb : tensor<4x32x64xf32>, tensor<4x64x16xf32>) outs(%f1 : tensor<4x32x16xf32>) -> tensor<4x32x16xf32>
  %e2 = tensor.empty() : tensor<1x16x16x16xf32>
  %f2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<1x16x16x16xf32>) -> tensor<1x16x16x16xf32>
  %conv = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
      ins(%img, %flt : tensor<1x18x18x8xf32>, tensor<3x3x8x16xf32>) outs(%f2 : tensor<1x16x16x16xf32>) -> tensor<1x16x16x16xf32>
  %e3 = tensor.empty() : tensor<64x128xf32>
  %exp = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                        iterator_types = ["parallel", "parallel"]}
      ins(%x, %y : tensor<64x128xf32>, tensor<64x128xf32>) outs(%e3 : tensor<64x128xf32>) {
    ^bb0(%u: f32, %v: f32, %o: f32):
      %m = arith.mulf %u, %v : f32
      %s = arith.addf %m, %u : f32
      %r = math.exp %s : f32
      linalg.yield %r : f32
    } -> tensor<64x128xf32>
  %e4 = tensor.empty() : tensor<f32>
  %f4 = linalg.fill ins(%zero : f32) outs(%e4 : tensor<f32>) -> tensor<f32>
  %sum = linalg.reduce ins(%big : tensor<4194304xf32>) outs(%f4 : tensor<f32>) dimensions = [0]
    (%in: f32, %acc: f32) {
      %s = arith.addf %in, %acc : f32
      linalg.yield %s : f32
    }
  %e5 = tensor.empty() : tensor<32x100xf32>
  %soft = linalg.softmax dimension(1) ins(%sm : tensor<32x100xf32>) outs(%e5 : tensor<32x100xf32>) -> tensor<32x100xf32>
  %scale = arith.constant 0.125 : f32
  %e6 = tensor.empty() : tensor<2x64x16xf32>
  %att = iree_linalg_ext.attention <indexing_maps = [affine_map<(b, m, n, k1, k2) -> (b, m, k1)>, affine_map<(b, m, n, k1, k2) -> (b, k2, k1)>, affine_map<(b, m, n, k1, k2) -> (b, k2, n)>, affine_map<(b, m, n, k1, k2) -> ()>, affine_map<(b, m, n, k1, k2) -> (b, m, n)>]>
      ins(%aq, %ak, %av, %scale : tensor<2x64x32xf32>, tensor<2x48x32xf32>, tensor<2x48x16xf32>, f32) outs(%e6 : tensor<2x64x16xf32>) {
    ^bb0(%score: f32):
      iree_linalg_ext.yield %score : f32
    } -> tensor<2x64x16xf32>
  %dw = arith.constant dense<0.01> : tensor<128x64x1x1xf32>
  %e7 = tensor.empty() : tensor<1x128x28x28xf32>
  %f7 = linalg.fill ins(%zero : f32) outs(%e7 : tensor<1x128x28x28xf32>) -> tensor<1x128x28x28xf32>
  %down = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>}
      ins(%ds, %dw : tensor<1x64x56x56xf32>, tensor<128x64x1x1xf32>) outs(%f7 : tensor<1x128x28x28xf32>) -> tensor<1x128x28x28xf32>
  return %mm, %bmm, %conv, %exp, %sum, %soft, %att, %down : tensor<64x256xf32>, tensor<4x32x16xf32>, tensor<1x16x16x16xf32>, tensor<64x128xf32>, tensor<f32>, tensor<32x100xf32>, tensor<2x64x16xf32>, tensor<1x128x28x28xf32>
}
