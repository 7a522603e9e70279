// RUN: thunder-ir-opt --split-input-file --verify-diagnostics %s | filecheck %s

// The verifier's messages name the op and say what is wrong: shapes, arity, dtypes,
// result types, operand types, and the tensor type itself.

func.func @shapes(%a: !prims.tensor<2x3xf32, cpu>, %b: !prims.tensor<3x2xf32, cpu>) -> !prims.tensor<2x3xf32, cpu> {
  %0 = "prims.add"(%a, %b) : (!prims.tensor<2x3xf32, cpu>, !prims.tensor<3x2xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
  func.return %0 : !prims.tensor<2x3xf32, cpu>
}

// CHECK:      prims.add: shapes (2, 3) and (3, 2) differ (broadcast with prims.broadcast_in_dim first)
// CHECK:      "prims.add"(%a, %b)
// CHECK-NEXT: ^^^^^^^^^^^^^^^^
// CHECK-NEXT: | Operation does not verify: prims.add: shapes (2, 3) and (3, 2) differ

// -----

func.func @arity(%a: !prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu> {
  %0 = "prims.exp"(%a, %a) : (!prims.tensor<2x3xf32, cpu>, !prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
  func.return %0 : !prims.tensor<2x3xf32, cpu>
}

// CHECK:      Expected 1 operand, but got 2
// CHECK:      "prims.exp"(%a, %a)

// -----

func.func @dtype(%a: !prims.tensor<2x3xi32, cpu>) -> !prims.tensor<2x3xi32, cpu> {
  %0 = "prims.exp"(%a) : (!prims.tensor<2x3xi32, cpu>) -> !prims.tensor<2x3xi32, cpu>
  func.return %0 : !prims.tensor<2x3xi32, cpu>
}

// CHECK:      prims.exp: expects a floating-point tensor, got torch.int32

// -----

func.func @result_type(%a: !prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf16, cpu> {
  %0 = "prims.exp"(%a) : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf16, cpu>
  func.return %0 : !prims.tensor<2x3xf16, cpu>
}

// CHECK:      prims.exp: result types (cpu f16[2, 3]) do not match the shape rule's (cpu f32[2, 3])

// -----

func.func @operand_type(%a: i32) -> !prims.tensor<2x3xf32, cpu> {
  %0 = "prims.exp"(%a) : (i32) -> !prims.tensor<2x3xf32, cpu>
  func.return %0 : !prims.tensor<2x3xf32, cpu>
}

// CHECK:      operand 'x' at position 0 does not verify:
// CHECK-NEXT: i32 should be of base attribute prims.tensor

// -----

func.func @matmul(%a: !prims.tensor<2x3xf32, cpu>, %b: !prims.tensor<4x5xf32, cpu>) -> !prims.tensor<2x5xf32, cpu> {
  %0 = "prims.matmul"(%a, %b) : (!prims.tensor<2x3xf32, cpu>, !prims.tensor<4x5xf32, cpu>) -> !prims.tensor<2x5xf32, cpu>
  func.return %0 : !prims.tensor<2x5xf32, cpu>
}

// CHECK:      prims.matmul: shapes (2, 3) and (4, 5) cannot be multiplied (3 != 4)

// -----

func.func @devices(%a: !prims.tensor<2xf32, cpu>, %b: !prims.tensor<2xf32, cuda:0>) -> !prims.tensor<2xf32, cpu> {
  %0 = "prims.mul"(%a, %b) : (!prims.tensor<2xf32, cpu>, !prims.tensor<2xf32, cuda:0>) -> !prims.tensor<2xf32, cpu>
  func.return %0 : !prims.tensor<2xf32, cpu>
}

// CHECK:      prims.mul: devices cpu and cuda:0 differ

// -----

func.func @ltorch_broadcast(%a: !prims.tensor<2x3xf32, cpu>, %b: !prims.tensor<4xf32, cpu>) -> !prims.tensor<2x3xf32, cpu> {
  %0 = "ltorch.add"(%a, %b) : (!prims.tensor<2x3xf32, cpu>, !prims.tensor<4xf32, cpu>) -> !prims.tensor<2x3xf32, cpu> loc("model.py":5:0)
  func.return %0 : !prims.tensor<2x3xf32, cpu>
}

// CHECK:      ltorch.add: invalid inputs (cpu f32[2, 3], cpu f32[4])

// -----

func.func @element_type(%a: !prims.tensor<2x3xi7, cpu>) -> !prims.tensor<2x3xi7, cpu> {
  func.return %a : !prims.tensor<2x3xi7, cpu>
}

// CHECK:      unsupported tensor element type i7

// -----

func.func @device(%a: !prims.tensor<2x3xf32, tpu>) -> !prims.tensor<2x3xf32, tpu> {
  func.return %a : !prims.tensor<2x3xf32, tpu>
}

// CHECK:      unsupported device 'tpu'; use cpu, meta or cuda:N
