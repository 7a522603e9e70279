// RUN: thunder-ir-opt -p strip-autograd %s | filecheck %s

// autograd.stop_gradient (x.detach()) is its operand once nothing is differentiated:
// its uses read %x.

func.func @forward(%x: !prims.tensor<3xf32, cpu>) -> !prims.tensor<3xf32, cpu> {
  %0 = "autograd.stop_gradient"(%x) : (!prims.tensor<3xf32, cpu>) -> !prims.tensor<3xf32, cpu>
  %1 = "prims.constant"() <{value = 2 : i64}> : () -> !prims.number<i64>
  %2 = "ltorch.mul"(%0, %1) : (!prims.tensor<3xf32, cpu>, !prims.number<i64>) -> !prims.tensor<3xf32, cpu>
  func.return %2 : !prims.tensor<3xf32, cpu>
}

// CHECK-LABEL: func.func @forward
// CHECK-NOT:   autograd.stop_gradient
// CHECK:       %[[C:.*]] = "prims.constant"() <{value = 2 : i64}>
// CHECK-NEXT:  %[[M:.*]] = "ltorch.mul"(%x, %[[C]])
// CHECK-NEXT:  func.return %[[M]]
