// RUN: thunder-ir-opt --split-input-file -p canonicalize %s | filecheck %s

// No-op shape and dtype ops fold to their operand; the ops left unused are erased.

func.func @identities(%x: !prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu> {
  %0 = "prims.convert_element_type"(%x) <{dtype = f32}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
  %1 = "prims.reshape"(%0) <{shape = array<i64: 2, 3>}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
  %2 = "prims.broadcast_in_dim"(%1) <{shape = array<i64: 2, 3>, broadcast_dims = array<i64: 0, 1>}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
  %3 = "prims.transpose"(%2) <{permutation = array<i64: 0, 1>}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
  %4 = "prims.squeeze"(%3) <{dims = array<i64>}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
  %5 = "prims.exp"(%4) : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
  func.return %5 : !prims.tensor<2x3xf32, cpu>
}

// CHECK-LABEL: func.func @identities
// CHECK-NEXT:  %[[E:.*]] = "prims.exp"(%x)
// CHECK-NEXT:  func.return %[[E]]

// -----

// A chain of reshapes becomes one reshape of the original operand (keeping the last
// one's location); a reshape back to the original shape disappears.

func.func @reshapes(%x: !prims.tensor<2x3xf32, cpu>) -> (!prims.tensor<1x6xf32, cpu>, !prims.tensor<2x3xf32, cpu>) {
  %0 = "prims.reshape"(%x) <{shape = array<i64: 6>}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<6xf32, cpu> loc("model.py":1:0)
  %1 = "prims.reshape"(%0) <{shape = array<i64: 3, 2>}> : (!prims.tensor<6xf32, cpu>) -> !prims.tensor<3x2xf32, cpu> loc("model.py":2:0)
  %2 = "prims.reshape"(%1) <{shape = array<i64: 1, 6>}> : (!prims.tensor<3x2xf32, cpu>) -> !prims.tensor<1x6xf32, cpu> loc("model.py":3:0)
  %3 = "prims.reshape"(%1) <{shape = array<i64: 2, 3>}> : (!prims.tensor<3x2xf32, cpu>) -> !prims.tensor<2x3xf32, cpu> loc("model.py":4:0)
  func.return %2, %3 : !prims.tensor<1x6xf32, cpu>, !prims.tensor<2x3xf32, cpu>
}

// CHECK-LABEL: func.func @reshapes
// CHECK-NEXT:  %[[R:.*]] = "prims.reshape"(%x) <{shape = array<i64: 1, 6>}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<1x6xf32, cpu> loc("model.py":3:0)
// CHECK-NEXT:  func.return %[[R]], %x

// -----

// convert(convert(x)) folds only when the first conversion is exact: f16 -> f32 -> f16
// is the identity, f16 -> f32 -> f64 is one widening; f32 -> f16 -> f32 rounds, so it
// stays.

func.func @converts(%h: !prims.tensor<4xf16, cpu>, %f: !prims.tensor<4xf32, cpu>) -> (!prims.tensor<4xf16, cpu>, !prims.tensor<4xf64, cpu>, !prims.tensor<4xf32, cpu>) {
  %0 = "prims.convert_element_type"(%h) <{dtype = f32}> : (!prims.tensor<4xf16, cpu>) -> !prims.tensor<4xf32, cpu>
  %1 = "prims.convert_element_type"(%0) <{dtype = f16}> : (!prims.tensor<4xf32, cpu>) -> !prims.tensor<4xf16, cpu>
  %2 = "prims.convert_element_type"(%0) <{dtype = f64}> : (!prims.tensor<4xf32, cpu>) -> !prims.tensor<4xf64, cpu>
  %3 = "prims.convert_element_type"(%f) <{dtype = f16}> : (!prims.tensor<4xf32, cpu>) -> !prims.tensor<4xf16, cpu>
  %4 = "prims.convert_element_type"(%3) <{dtype = f32}> : (!prims.tensor<4xf16, cpu>) -> !prims.tensor<4xf32, cpu>
  func.return %1, %2, %4 : !prims.tensor<4xf16, cpu>, !prims.tensor<4xf64, cpu>, !prims.tensor<4xf32, cpu>
}

// CHECK-LABEL: func.func @converts
// CHECK-NEXT:  %[[W:.*]] = "prims.convert_element_type"(%h) <{dtype = f64}> : (!prims.tensor<4xf16, cpu>) -> !prims.tensor<4xf64, cpu>
// CHECK-NEXT:  %[[N:.*]] = "prims.convert_element_type"(%f) <{dtype = f16}>
// CHECK-NEXT:  %[[B:.*]] = "prims.convert_element_type"(%[[N]]) <{dtype = f32}>
// CHECK-NEXT:  func.return %h, %[[W]], %[[B]]

// -----

// Multiplying or dividing by 1 and subtracting 0 are identities. Adding 0 is one only
// for integers: for floats, -0.0 + 0.0 is +0.0, so only adding -0.0 folds.

func.func @arith(%x: !prims.tensor<4xf32, cpu>, %i: !prims.tensor<4xi64, cpu>) -> (!prims.tensor<4xf32, cpu>, !prims.tensor<4xf32, cpu>, !prims.tensor<4xi64, cpu>) {
  %one = "prims.constant"() <{value = 1.000000e+00 : f64}> : () -> !prims.number<f64>
  %zero = "prims.constant"() <{value = 0.000000e+00 : f64}> : () -> !prims.number<f64>
  %mzero = "prims.constant"() <{value = -0.000000e+00 : f64}> : () -> !prims.number<f64>
  %izero = "prims.constant"() <{value = 0 : i64}> : () -> !prims.number<i64>
  %0 = "prims.mul"(%one, %x) : (!prims.number<f64>, !prims.tensor<4xf32, cpu>) -> !prims.tensor<4xf32, cpu>
  %1 = "prims.div"(%0, %one) : (!prims.tensor<4xf32, cpu>, !prims.number<f64>) -> !prims.tensor<4xf32, cpu>
  %2 = "prims.sub"(%1, %zero) : (!prims.tensor<4xf32, cpu>, !prims.number<f64>) -> !prims.tensor<4xf32, cpu>
  %3 = "prims.add"(%2, %mzero) : (!prims.tensor<4xf32, cpu>, !prims.number<f64>) -> !prims.tensor<4xf32, cpu>
  %4 = "prims.add"(%3, %zero) : (!prims.tensor<4xf32, cpu>, !prims.number<f64>) -> !prims.tensor<4xf32, cpu>
  %5 = "prims.add"(%izero, %i) : (!prims.number<i64>, !prims.tensor<4xi64, cpu>) -> !prims.tensor<4xi64, cpu>
  func.return %3, %4, %5 : !prims.tensor<4xf32, cpu>, !prims.tensor<4xf32, cpu>, !prims.tensor<4xi64, cpu>
}

// CHECK-LABEL: func.func @arith
// CHECK-NEXT:  %[[Z:.*]] = "prims.constant"() <{value = 0.000000e+00 : f64}>
// CHECK-NEXT:  %[[A:.*]] = "prims.add"(%x, %[[Z]])
// CHECK-NEXT:  func.return %x, %[[A]], %i

// -----

// Real broadcasts, transposes and squeezes stay.

func.func @kept(%x: !prims.tensor<1x3xf32, cpu>) -> (!prims.tensor<2x3xf32, cpu>, !prims.tensor<3x1xf32, cpu>, !prims.tensor<3xf32, cpu>) {
  %0 = "prims.broadcast_in_dim"(%x) <{shape = array<i64: 2, 3>, broadcast_dims = array<i64: 0, 1>}> : (!prims.tensor<1x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
  %1 = "prims.transpose"(%x) <{permutation = array<i64: 1, 0>}> : (!prims.tensor<1x3xf32, cpu>) -> !prims.tensor<3x1xf32, cpu>
  %2 = "prims.squeeze"(%x) <{dims = array<i64: 0>}> : (!prims.tensor<1x3xf32, cpu>) -> !prims.tensor<3xf32, cpu>
  func.return %0, %1, %2 : !prims.tensor<2x3xf32, cpu>, !prims.tensor<3x1xf32, cpu>, !prims.tensor<3xf32, cpu>
}

// CHECK-LABEL: func.func @kept
// CHECK-NEXT:  "prims.broadcast_in_dim"(%x)
// CHECK-NEXT:  "prims.transpose"(%x)
// CHECK-NEXT:  "prims.squeeze"(%x)
