// A one-layer encoder block in StableHLO with its weights as globals named the way TensorFlow's
// export to IREE names them: quoted paths such as @"__iree_flow_bert/embeddings/...". The names
// never reach a file name, so the program must profile. Written for tracelink's tests.
module @bert_style {
  util.global private @"__iree_flow_bert/embeddings/LayerNorm/gamma" = dense<1.0> : tensor<64xf32>
  util.global private @"__iree_flow_bert/embeddings/LayerNorm/beta" = dense<0.0> : tensor<64xf32>
  util.global private @"__iree_flow_bert/encoder/layer_0/attention/self/query/kernel" {noinline} = dense<0.01> : tensor<64x64xf32>
  util.global private @"__iree_flow_bert/encoder/layer_0/attention/self/key/kernel" {noinline} = dense<0.02> : tensor<64x64xf32>
  util.global private @"__iree_flow_bert/encoder/layer_0/attention/self/value/kernel" {noinline} = dense<0.03> : tensor<64x64xf32>
  util.global private @"__iree_flow_bert/encoder/layer_0/intermediate/dense/kernel" {noinline} = dense<0.01> : tensor<64x256xf32>
  util.global private @"__iree_flow_bert/encoder/layer_0/intermediate/dense/bias" = dense<0.1> : tensor<256xf32>
  util.global private @"__iree_flow_bert/encoder/layer_0/output/dense/kernel" {noinline} = dense<0.01> : tensor<256x64xf32>

  func.func @serving_default(%x: tensor<16x64xf32>) -> tensor<16x64xf32> {
    %gamma = util.global.load @"__iree_flow_bert/embeddings/LayerNorm/gamma" : tensor<64xf32>
    %beta = util.global.load @"__iree_flow_bert/embeddings/LayerNorm/beta" : tensor<64xf32>
    %wq = util.global.load @"__iree_flow_bert/encoder/layer_0/attention/self/query/kernel" : tensor<64x64xf32>
    %wk = util.global.load @"__iree_flow_bert/encoder/layer_0/attention/self/key/kernel" : tensor<64x64xf32>
    %wv = util.global.load @"__iree_flow_bert/encoder/layer_0/attention/self/value/kernel" : tensor<64x64xf32>
    %w1 = util.global.load @"__iree_flow_bert/encoder/layer_0/intermediate/dense/kernel" : tensor<64x256xf32>
    %b1 = util.global.load @"__iree_flow_bert/encoder/layer_0/intermediate/dense/bias" : tensor<256xf32>
    %w2 = util.global.load @"__iree_flow_bert/encoder/layer_0/output/dense/kernel" : tensor<256x64xf32>
    %zero = stablehlo.constant dense<0.0> : tensor<f32>
    %inv_n = stablehlo.constant dense<1.562500e-02> : tensor<16xf32>
    // embeddings/LayerNorm: mean, variance, normalise, scale and shift
    %sum = stablehlo.reduce(%x init: %zero) applies stablehlo.add across dimensions = [1] : (tensor<16x64xf32>, tensor<f32>) -> tensor<16xf32> loc("bert/embeddings/LayerNorm/mean"("bert.py":12:5))
    %mean = stablehlo.multiply %sum, %inv_n : tensor<16xf32> loc("bert/embeddings/LayerNorm/mean"("bert.py":12:5))
    %mean_b = stablehlo.broadcast_in_dim %mean, dims = [0] : (tensor<16xf32>) -> tensor<16x64xf32> loc("bert/embeddings/LayerNorm/sub"("bert.py":13:5))
    %centered = stablehlo.subtract %x, %mean_b : tensor<16x64xf32> loc("bert/embeddings/LayerNorm/sub"("bert.py":13:5))
    %sq = stablehlo.multiply %centered, %centered : tensor<16x64xf32> loc("bert/embeddings/LayerNorm/var"("bert.py":14:5))
    %sqsum = stablehlo.reduce(%sq init: %zero) applies stablehlo.add across dimensions = [1] : (tensor<16x64xf32>, tensor<f32>) -> tensor<16xf32> loc("bert/embeddings/LayerNorm/var"("bert.py":14:5))
    %var = stablehlo.multiply %sqsum, %inv_n : tensor<16xf32> loc("bert/embeddings/LayerNorm/var"("bert.py":14:5))
    %rstd = stablehlo.rsqrt %var : tensor<16xf32> loc("bert/embeddings/LayerNorm/rsqrt"("bert.py":15:5))
    %rstd_b = stablehlo.broadcast_in_dim %rstd, dims = [0] : (tensor<16xf32>) -> tensor<16x64xf32> loc("bert/embeddings/LayerNorm/mul"("bert.py":16:5))
    %normed = stablehlo.multiply %centered, %rstd_b : tensor<16x64xf32> loc("bert/embeddings/LayerNorm/mul"("bert.py":16:5))
    %gamma_b = stablehlo.broadcast_in_dim %gamma, dims = [1] : (tensor<64xf32>) -> tensor<16x64xf32> loc("bert/embeddings/LayerNorm/mul_1"("bert.py":17:5))
    %scaled = stablehlo.multiply %normed, %gamma_b : tensor<16x64xf32> loc("bert/embeddings/LayerNorm/mul_1"("bert.py":17:5))
    %beta_b = stablehlo.broadcast_in_dim %beta, dims = [1] : (tensor<64xf32>) -> tensor<16x64xf32> loc("bert/embeddings/LayerNorm/add"("bert.py":18:5))
    %h = stablehlo.add %scaled, %beta_b : tensor<16x64xf32> loc("bert/embeddings/LayerNorm/add"("bert.py":18:5))
    // encoder/layer_0/attention/self
    %q = stablehlo.dot_general %h, %wq, contracting_dims = [1] x [0] : (tensor<16x64xf32>, tensor<64x64xf32>) -> tensor<16x64xf32> loc("bert/encoder/layer_0/attention/self/query/MatMul"("bert.py":22:9))
    %k = stablehlo.dot_general %h, %wk, contracting_dims = [1] x [0] : (tensor<16x64xf32>, tensor<64x64xf32>) -> tensor<16x64xf32> loc("bert/encoder/layer_0/attention/self/key/MatMul"("bert.py":23:9))
    %v = stablehlo.dot_general %h, %wv, contracting_dims = [1] x [0] : (tensor<16x64xf32>, tensor<64x64xf32>) -> tensor<16x64xf32> loc("bert/encoder/layer_0/attention/self/value/MatMul"("bert.py":24:9))
    %scores = stablehlo.dot_general %q, %k, contracting_dims = [1] x [1] : (tensor<16x64xf32>, tensor<16x64xf32>) -> tensor<16x16xf32> loc("bert/encoder/layer_0/attention/self/MatMul"("bert.py":25:9))
    %ninf = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %max = stablehlo.reduce(%scores init: %ninf) applies stablehlo.maximum across dimensions = [1] : (tensor<16x16xf32>, tensor<f32>) -> tensor<16xf32> loc("bert/encoder/layer_0/attention/self/Softmax"("bert.py":26:9))
    %max_b = stablehlo.broadcast_in_dim %max, dims = [0] : (tensor<16xf32>) -> tensor<16x16xf32> loc("bert/encoder/layer_0/attention/self/Softmax"("bert.py":26:9))
    %shifted = stablehlo.subtract %scores, %max_b : tensor<16x16xf32> loc("bert/encoder/layer_0/attention/self/Softmax"("bert.py":26:9))
    %exp = stablehlo.exponential %shifted : tensor<16x16xf32> loc("bert/encoder/layer_0/attention/self/Softmax"("bert.py":26:9))
    %den = stablehlo.reduce(%exp init: %zero) applies stablehlo.add across dimensions = [1] : (tensor<16x16xf32>, tensor<f32>) -> tensor<16xf32> loc("bert/encoder/layer_0/attention/self/Softmax"("bert.py":26:9))
    %den_b = stablehlo.broadcast_in_dim %den, dims = [0] : (tensor<16xf32>) -> tensor<16x16xf32> loc("bert/encoder/layer_0/attention/self/Softmax"("bert.py":26:9))
    %probs = stablehlo.divide %exp, %den_b : tensor<16x16xf32> loc("bert/encoder/layer_0/attention/self/Softmax"("bert.py":26:9))
    %ctx = stablehlo.dot_general %probs, %v, contracting_dims = [1] x [0] : (tensor<16x16xf32>, tensor<16x64xf32>) -> tensor<16x64xf32> loc("bert/encoder/layer_0/attention/self/MatMul_1"("bert.py":27:9))
    %res = stablehlo.add %ctx, %h : tensor<16x64xf32> loc("bert/encoder/layer_0/attention/output/add"("bert.py":28:9))
    // encoder/layer_0/intermediate and output: a ReLU feed-forward block
    %up = stablehlo.dot_general %res, %w1, contracting_dims = [1] x [0] : (tensor<16x64xf32>, tensor<64x256xf32>) -> tensor<16x256xf32> loc("bert/encoder/layer_0/intermediate/dense/MatMul"("bert.py":31:9))
    %b1_b = stablehlo.broadcast_in_dim %b1, dims = [1] : (tensor<256xf32>) -> tensor<16x256xf32> loc("bert/encoder/layer_0/intermediate/dense/BiasAdd"("bert.py":31:9))
    %up_b = stablehlo.add %up, %b1_b : tensor<16x256xf32> loc("bert/encoder/layer_0/intermediate/dense/BiasAdd"("bert.py":31:9))
    %zeros = stablehlo.constant dense<0.0> : tensor<16x256xf32>
    %act = stablehlo.maximum %up_b, %zeros : tensor<16x256xf32> loc("bert/encoder/layer_0/intermediate/Relu"("bert.py":32:9))
    %down = stablehlo.dot_general %act, %w2, contracting_dims = [1] x [0] : (tensor<16x256xf32>, tensor<256x64xf32>) -> tensor<16x64xf32> loc("bert/encoder/layer_0/output/dense/MatMul"("bert.py":33:9))
    %out = stablehlo.add %down, %res : tensor<16x64xf32> loc("bert/encoder/layer_0/output/add"("bert.py":34:9))
    return %out : tensor<16x64xf32>
  }
}
