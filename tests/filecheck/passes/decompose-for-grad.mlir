// RUN: thunder-ir-opt -p decompose-for-grad %s | filecheck %s

// Before autodiff, the ltorch ops without a VJP rule of their own (log1p) become prims,
// which have rules; those with a rule (exp) stay whole.

func.func @forward(%x: !prims.tensor<4xf32, cpu>) -> !prims.tensor<4xf32, cpu> {
  %0 = "ltorch.log1p"(%x) : (!prims.tensor<4xf32, cpu>) -> !prims.tensor<4xf32, cpu>
  %1 = "ltorch.exp"(%0) : (!prims.tensor<4xf32, cpu>) -> !prims.tensor<4xf32, cpu>
  func.return %1 : !prims.tensor<4xf32, cpu>
}

// CHECK-LABEL: func.func @forward
// CHECK-NEXT:  %[[L:.*]] = "prims.log1p"(%x)
// CHECK-NEXT:  %[[E:.*]] = "ltorch.exp"(%[[L]])
// CHECK-NEXT:  func.return %[[E]]
