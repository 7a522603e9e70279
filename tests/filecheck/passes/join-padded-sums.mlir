// RUN: thunder-ir-opt --split-input-file -p join-padded-sums %s | filecheck %s

// Slabs padded along dim 1 at rows 0 and 2 (row 1 and 3 left as zeros) and a dense rest:
// one cat of the slabs and zero fills in row order, + 0.0 (a -0.0 becomes +0.0, as the
// sum made it), + the rest. The adds and pads are erased.

func.func @backward(%a: !prims.tensor<2x1x3xf32, cpu>, %b: !prims.tensor<2x1x3xf32, cpu>, %r: !prims.tensor<2x4x3xf32, cpu>) -> !prims.tensor<2x4x3xf32, cpu> {
  %0 = "prims.pad"(%a) <{padding_value = 0.000000e+00 : f64, padding_config = [array<i64: 0, 0, 0>, array<i64: 0, 3, 0>, array<i64: 0, 0, 0>]}> : (!prims.tensor<2x1x3xf32, cpu>) -> !prims.tensor<2x4x3xf32, cpu>
  %1 = "prims.pad"(%b) <{padding_value = 0.000000e+00 : f64, padding_config = [array<i64: 0, 0, 0>, array<i64: 2, 1, 0>, array<i64: 0, 0, 0>]}> : (!prims.tensor<2x1x3xf32, cpu>) -> !prims.tensor<2x4x3xf32, cpu>
  %2 = "ltorch.add"(%r, %1) <{alpha = 1 : i64}> : (!prims.tensor<2x4x3xf32, cpu>, !prims.tensor<2x4x3xf32, cpu>) -> !prims.tensor<2x4x3xf32, cpu>
  %3 = "prims.add"(%0, %2) : (!prims.tensor<2x4x3xf32, cpu>, !prims.tensor<2x4x3xf32, cpu>) -> !prims.tensor<2x4x3xf32, cpu>
  func.return %3 : !prims.tensor<2x4x3xf32, cpu>
}

// CHECK-LABEL: func.func @backward
// CHECK-NEXT:  %[[Z1:.*]] = "prims.full"() <{shape = array<i64: 2, 1, 3>, fill_value = 0.000000e+00 : f64, device = "cpu", dtype = f32}>
// CHECK-NEXT:  %[[Z3:.*]] = "prims.full"() <{shape = array<i64: 2, 1, 3>, fill_value = 0.000000e+00 : f64, device = "cpu", dtype = f32}>
// CHECK-NEXT:  %[[C:.*]] = "prims.cat"(%a, %[[Z1]], %b, %[[Z3]]) <{dim = 1 : i64}>
// CHECK-NEXT:  %[[ZERO:.*]] = "prims.constant"() <{value = 0.000000e+00 : f64}>
// CHECK-NEXT:  %[[S:.*]] = "prims.add"(%[[C]], %[[ZERO]])
// CHECK-NEXT:  %[[R:.*]] = "prims.add"(%r, %[[S]])
// CHECK-NEXT:  func.return %[[R]]

// -----

// Left alone: slabs that overlap (rows 0-1 and 1-2), and a sum with two dense terms
// (reordering them would change the rounding).

func.func @overlap(%a: !prims.tensor<2x2x3xf32, cpu>, %b: !prims.tensor<2x2x3xf32, cpu>) -> !prims.tensor<2x4x3xf32, cpu> {
  %0 = "prims.pad"(%a) <{padding_value = 0.000000e+00 : f64, padding_config = [array<i64: 0, 0, 0>, array<i64: 0, 2, 0>, array<i64: 0, 0, 0>]}> : (!prims.tensor<2x2x3xf32, cpu>) -> !prims.tensor<2x4x3xf32, cpu>
  %1 = "prims.pad"(%b) <{padding_value = 0.000000e+00 : f64, padding_config = [array<i64: 0, 0, 0>, array<i64: 1, 1, 0>, array<i64: 0, 0, 0>]}> : (!prims.tensor<2x2x3xf32, cpu>) -> !prims.tensor<2x4x3xf32, cpu>
  %2 = "prims.add"(%0, %1) : (!prims.tensor<2x4x3xf32, cpu>, !prims.tensor<2x4x3xf32, cpu>) -> !prims.tensor<2x4x3xf32, cpu>
  func.return %2 : !prims.tensor<2x4x3xf32, cpu>
}

// CHECK-LABEL: func.func @overlap
// CHECK-NEXT:  "prims.pad"(%a)
// CHECK-NEXT:  "prims.pad"(%b)
// CHECK-NEXT:  "prims.add"
// CHECK-NEXT:  func.return

// -----

func.func @two_dense(%a: !prims.tensor<2x1x3xf32, cpu>, %b: !prims.tensor<2x1x3xf32, cpu>, %r: !prims.tensor<2x2x3xf32, cpu>, %s: !prims.tensor<2x2x3xf32, cpu>) -> !prims.tensor<2x2x3xf32, cpu> {
  %0 = "prims.pad"(%a) <{padding_value = 0.000000e+00 : f64, padding_config = [array<i64: 0, 0, 0>, array<i64: 0, 1, 0>, array<i64: 0, 0, 0>]}> : (!prims.tensor<2x1x3xf32, cpu>) -> !prims.tensor<2x2x3xf32, cpu>
  %1 = "prims.pad"(%b) <{padding_value = 0.000000e+00 : f64, padding_config = [array<i64: 0, 0, 0>, array<i64: 1, 0, 0>, array<i64: 0, 0, 0>]}> : (!prims.tensor<2x1x3xf32, cpu>) -> !prims.tensor<2x2x3xf32, cpu>
  %2 = "prims.add"(%r, %0) : (!prims.tensor<2x2x3xf32, cpu>, !prims.tensor<2x2x3xf32, cpu>) -> !prims.tensor<2x2x3xf32, cpu>
  %3 = "prims.add"(%2, %s) : (!prims.tensor<2x2x3xf32, cpu>, !prims.tensor<2x2x3xf32, cpu>) -> !prims.tensor<2x2x3xf32, cpu>
  %4 = "prims.add"(%3, %1) : (!prims.tensor<2x2x3xf32, cpu>, !prims.tensor<2x2x3xf32, cpu>) -> !prims.tensor<2x2x3xf32, cpu>
  func.return %4 : !prims.tensor<2x2x3xf32, cpu>
}

// CHECK-LABEL: func.func @two_dense
// CHECK-NOT:   prims.cat
// CHECK:       func.return
