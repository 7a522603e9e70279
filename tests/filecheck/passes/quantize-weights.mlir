// RUN: thunder-ir-opt --split-input-file -p 'quantize-weights{bits=8}' %s | filecheck %s
// RUN: thunder-ir-opt --split-input-file -p 'quantize-weights{bits=4 group_size=32}' %s | filecheck %s --check-prefix=INT4
// RUN: thunder-ir-opt --split-input-file -p 'quantize-weights{bits=8},decompose-ltorch' %s | filecheck %s --check-prefix=DECOMP

// A linear on a function argument (a module weight) runs on quantized storage: the
// quantize op, then the quantized linear with the bias. A linear on a computed weight
// stays.

func.func @forward(%x: !prims.tensor<2x64xf32, cpu>, %t_fc_weight: !prims.tensor<32x64xf32, cpu>, %t_fc_bias: !prims.tensor<32xf32, cpu>) -> !prims.tensor<2x32xf32, cpu> {
  %0 = "ltorch.linear"(%x, %t_fc_weight, %t_fc_bias) : (!prims.tensor<2x64xf32, cpu>, !prims.tensor<32x64xf32, cpu>, !prims.tensor<32xf32, cpu>) -> !prims.tensor<2x32xf32, cpu>
  %w = "ltorch.neg"(%t_fc_weight) : (!prims.tensor<32x64xf32, cpu>) -> !prims.tensor<32x64xf32, cpu>
  %1 = "ltorch.linear"(%x, %w, %t_fc_bias) : (!prims.tensor<2x64xf32, cpu>, !prims.tensor<32x64xf32, cpu>, !prims.tensor<32xf32, cpu>) -> !prims.tensor<2x32xf32, cpu>
  %2 = "ltorch.add"(%0, %1) <{alpha = 1 : i64}> : (!prims.tensor<2x32xf32, cpu>, !prims.tensor<2x32xf32, cpu>) -> !prims.tensor<2x32xf32, cpu>
  func.return %2 : !prims.tensor<2x32xf32, cpu>
}

// CHECK-LABEL: func.func @forward
// CHECK-NEXT:  %[[Q:.*]], %[[S:.*]] = "quant.quantize_int8"(%t_fc_weight) : (!prims.tensor<32x64xf32, cpu>) -> (!prims.tensor<32x64xi8, cpu>, !prims.tensor<32xf32, cpu>)
// CHECK-NEXT:  "quant.int8_linear"(%x, %[[Q]], %[[S]], %t_fc_bias)
// CHECK:       "ltorch.linear"(%x, %w, %t_fc_bias)

// INT4-LABEL: func.func @forward
// INT4-NEXT:  %[[Q:.*]], %[[S:.*]] = "quant.quantize_int4"(%t_fc_weight) <{group_size = 32 : i64}> : (!prims.tensor<32x64xf32, cpu>) -> (!prims.tensor<32x32xui8, cpu>, !prims.tensor<2x32x2xf32, cpu>)
// INT4-NEXT:  "quant.int4_linear"(%x, %[[Q]], %[[S]], %t_fc_bias) <{group_size = 32 : i64}>

// Unclaimed, the ops decompose: the scheme's arithmetic, then a linear on q * scale.
// DECOMP-LABEL: func.func @forward
// DECOMP-NOT:   quant.
// DECOMP:       "prims.round"
// DECOMP:       "prims.convert_element_type"{{.*}}dtype = i8
// DECOMP:       "prims.linear"
