// A small conv net: a stem conv, then the same residual-free block three times (same shapes,
// so IREE compiles each block's dispatches once and calls the shared executables from three
// call sites), global average pooling and a classifier. Locations point at convnet.py.
#id = affine_map<(n, h, w, c) -> (n, h, w, c)>
#chan = affine_map<(n, h, w, c) -> (c)>
#pool_in = affine_map<(n, c, h, w) -> (n, h, w, c)>
#pool_out = affine_map<(n, c, h, w) -> (n, c)>
func.func @convnet(%image: tensor<1x32x32x16xf32>,
                   %wb1: tensor<3x3x16x16xf32>, %bb1: tensor<16xf32>,
                   %wb2: tensor<3x3x16x16xf32>, %bb2: tensor<16xf32>,
                   %wb3: tensor<3x3x16x16xf32>, %bb3: tensor<16xf32>,
                   %wfc: tensor<16x10xf32>) -> tensor<1x10xf32> {
  %zero = arith.constant 0.0 : f32
  %inv_area = arith.constant 0.0009765625 : f32
  %e = tensor.empty() : tensor<1x32x32x16xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<1x32x32x16xf32>) -> tensor<1x32x32x16xf32>
  // block 1: pad, 3x3 conv, bias, relu (convnet.py:40 calls Block.forward)
  %p1 = tensor.pad %image low[0, 1, 1, 0] high[0, 1, 1, 0] {
  ^bb0(%n: index, %h: index, %w: index, %c: index):
    tensor.yield %zero : f32
  } : tensor<1x32x32x16xf32> to tensor<1x34x34x16xf32> loc(callsite("block1.pad"("convnet.py":12:15) at "convnet.py":40:13))
  %c1 = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
      ins(%p1, %wb1 : tensor<1x34x34x16xf32>, tensor<3x3x16x16xf32>) outs(%z : tensor<1x32x32x16xf32>) -> tensor<1x32x32x16xf32> loc(callsite("block1.conv"("convnet.py":13:15) at "convnet.py":40:13))
  %r1 = linalg.generic {indexing_maps = [#id, #chan, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%c1, %bb1 : tensor<1x32x32x16xf32>, tensor<16xf32>) outs(%e : tensor<1x32x32x16xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32 loc(callsite("block1.bias"("convnet.py":14:15) at "convnet.py":40:13))
    %t = arith.maximumf %s, %zero : f32 loc(callsite("block1.relu"("convnet.py":15:16) at "convnet.py":40:13))
    linalg.yield %t : f32
  } -> tensor<1x32x32x16xf32> loc(callsite("block1.relu"("convnet.py":15:16) at "convnet.py":40:13))
  // block 2: pad, 3x3 conv, bias, relu (convnet.py:41 calls Block.forward)
  %p2 = tensor.pad %r1 low[0, 1, 1, 0] high[0, 1, 1, 0] {
  ^bb0(%n: index, %h: index, %w: index, %c: index):
    tensor.yield %zero : f32
  } : tensor<1x32x32x16xf32> to tensor<1x34x34x16xf32> loc(callsite("block2.pad"("convnet.py":12:15) at "convnet.py":41:13))
  %c2 = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
      ins(%p2, %wb2 : tensor<1x34x34x16xf32>, tensor<3x3x16x16xf32>) outs(%z : tensor<1x32x32x16xf32>) -> tensor<1x32x32x16xf32> loc(callsite("block2.conv"("convnet.py":13:15) at "convnet.py":41:13))
  %r2 = linalg.generic {indexing_maps = [#id, #chan, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%c2, %bb2 : tensor<1x32x32x16xf32>, tensor<16xf32>) outs(%e : tensor<1x32x32x16xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32 loc(callsite("block2.bias"("convnet.py":14:15) at "convnet.py":41:13))
    %t = arith.maximumf %s, %zero : f32 loc(callsite("block2.relu"("convnet.py":15:16) at "convnet.py":41:13))
    linalg.yield %t : f32
  } -> tensor<1x32x32x16xf32> loc(callsite("block2.relu"("convnet.py":15:16) at "convnet.py":41:13))
  // block 3: pad, 3x3 conv, bias, relu (convnet.py:42 calls Block.forward)
  %p3 = tensor.pad %r2 low[0, 1, 1, 0] high[0, 1, 1, 0] {
  ^bb0(%n: index, %h: index, %w: index, %c: index):
    tensor.yield %zero : f32
  } : tensor<1x32x32x16xf32> to tensor<1x34x34x16xf32> loc(callsite("block3.pad"("convnet.py":12:15) at "convnet.py":42:13))
  %c3 = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
      ins(%p3, %wb3 : tensor<1x34x34x16xf32>, tensor<3x3x16x16xf32>) outs(%z : tensor<1x32x32x16xf32>) -> tensor<1x32x32x16xf32> loc(callsite("block3.conv"("convnet.py":13:15) at "convnet.py":42:13))
  %r3 = linalg.generic {indexing_maps = [#id, #chan, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%c3, %bb3 : tensor<1x32x32x16xf32>, tensor<16xf32>) outs(%e : tensor<1x32x32x16xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32 loc(callsite("block3.bias"("convnet.py":14:15) at "convnet.py":42:13))
    %t = arith.maximumf %s, %zero : f32 loc(callsite("block3.relu"("convnet.py":15:16) at "convnet.py":42:13))
    linalg.yield %t : f32
  } -> tensor<1x32x32x16xf32> loc(callsite("block3.relu"("convnet.py":15:16) at "convnet.py":42:13))
  %e_pool = tensor.empty() : tensor<1x16xf32>
  %z_pool = linalg.fill ins(%zero : f32) outs(%e_pool : tensor<1x16xf32>) -> tensor<1x16xf32>
  %sum = linalg.generic {indexing_maps = [#pool_in, #pool_out], iterator_types = ["parallel", "parallel", "reduction", "reduction"]}
      ins(%r3 : tensor<1x32x32x16xf32>) outs(%z_pool : tensor<1x16xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %a, %acc : f32 loc("pool.sum"("convnet.py":43:12))
    linalg.yield %s : f32
  } -> tensor<1x16xf32> loc("pool.sum"("convnet.py":43:12))
  %mean = linalg.generic {indexing_maps = [affine_map<(n, c) -> (n, c)>, affine_map<(n, c) -> (n, c)>], iterator_types = ["parallel", "parallel"]}
      ins(%sum : tensor<1x16xf32>) outs(%e_pool : tensor<1x16xf32>) {
  ^bb0(%a: f32, %o: f32):
    %m = arith.mulf %a, %inv_area : f32 loc("pool.mean"("convnet.py":43:20))
    linalg.yield %m : f32
  } -> tensor<1x16xf32> loc("pool.mean"("convnet.py":43:20))
  %e_fc = tensor.empty() : tensor<1x10xf32>
  %z_fc = linalg.fill ins(%zero : f32) outs(%e_fc : tensor<1x10xf32>) -> tensor<1x10xf32>
  %logits = linalg.matmul ins(%mean, %wfc : tensor<1x16xf32>, tensor<16x10xf32>) outs(%z_fc : tensor<1x10xf32>) -> tensor<1x10xf32> loc("classifier.fc"("convnet.py":44:16))
  return %logits : tensor<1x10xf32>
}
