// RUN: thunder-ir-opt --split-input-file -p cse %s | filecheck %s

// Equal pure ops merge, whatever their source location (the first one's stays);
// ops that differ in a property, an operand or a result type do not.

func.func @merge(%x: !prims.tensor<2x3xf32, cpu>) -> (!prims.tensor<2x3xf32, cpu>, !prims.tensor<2xf32, cpu>, !prims.tensor<3xf32, cpu>) {
  %0 = "prims.exp"(%x) : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu> loc("model.py":3:0)
  %1 = "prims.exp"(%x) : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu> loc("model.py":7:0)
  %2 = "prims.add"(%0, %1) : (!prims.tensor<2x3xf32, cpu>, !prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
  %3 = "prims.add"(%0, %1) : (!prims.tensor<2x3xf32, cpu>, !prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
  %4 = "prims.mul"(%2, %3) : (!prims.tensor<2x3xf32, cpu>, !prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
  %5 = "prims.sum"(%4) <{dims = array<i64: 1>}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2xf32, cpu>
  %6 = "prims.sum"(%4) <{dims = array<i64: 0>}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<3xf32, cpu>
  func.return %4, %5, %6 : !prims.tensor<2x3xf32, cpu>, !prims.tensor<2xf32, cpu>, !prims.tensor<3xf32, cpu>
}

// CHECK-LABEL: func.func @merge
// CHECK-NEXT:  %[[E:.*]] = "prims.exp"(%x) {{.*}} loc("model.py":3:0)
// CHECK-NEXT:  %[[A:.*]] = "prims.add"(%[[E]], %[[E]])
// CHECK-NEXT:  %[[M:.*]] = "prims.mul"(%[[A]], %[[A]])
// CHECK-NEXT:  %[[S1:.*]] = "prims.sum"(%[[M]]) <{dims = array<i64: 1>}>
// CHECK-NEXT:  %[[S0:.*]] = "prims.sum"(%[[M]]) <{dims = array<i64: 0>}>
// CHECK-NEXT:  func.return %[[M]], %[[S1]], %[[S0]]

// -----

// Random draws are not Pure: two identical prims.bernoulli stay two draws.

func.func @rng() -> (!prims.tensor<2xf32, cpu>, !prims.tensor<2xf32, cpu>) {
  %0 = "prims.bernoulli"() <{shape = array<i64: 2>, p = 5.000000e-01 : f64, device = "cpu", dtype = f32}> : () -> !prims.tensor<2xf32, cpu>
  %1 = "prims.bernoulli"() <{shape = array<i64: 2>, p = 5.000000e-01 : f64, device = "cpu", dtype = f32}> : () -> !prims.tensor<2xf32, cpu>
  func.return %0, %1 : !prims.tensor<2xf32, cpu>, !prims.tensor<2xf32, cpu>
}

// CHECK-LABEL: func.func @rng
// CHECK-NEXT:  %[[U0:.*]] = "prims.bernoulli"()
// CHECK-NEXT:  %[[U1:.*]] = "prims.bernoulli"()
// CHECK-NEXT:  func.return %[[U0]], %[[U1]]

// -----

// Opaque torch calls may have effects: never merged.

func.func @calls(%x: !prims.tensor<2x3xf32, cpu>) -> (!prims.tensor<2x3xf32, cpu>, !prims.tensor<2x3xf32, cpu>) {
  %0 = "torch.call"(%x) <{callee = "torch.nn.functional.dropout", args = [#prims.operand<0>]}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
  %1 = "torch.call"(%x) <{callee = "torch.nn.functional.dropout", args = [#prims.operand<0>]}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
  func.return %0, %1 : !prims.tensor<2x3xf32, cpu>, !prims.tensor<2x3xf32, cpu>
}

// CHECK-LABEL: func.func @calls
// CHECK-NEXT:  %[[C0:.*]] = "torch.call"(%x)
// CHECK-NEXT:  %[[C1:.*]] = "torch.call"(%x)
// CHECK-NEXT:  func.return %[[C0]], %[[C1]]
