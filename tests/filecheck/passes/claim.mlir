// RUN: thunder-ir-opt -p 'claim{executors=torch}' %s | filecheck %s
// RUN: thunder-ir-opt -p 'claim{executors=sdpa}' %s | filecheck %s --check-prefix=SDPA

// The first executor (by priority) that runs an ltorch op whole marks it claimed, so
// decompose-ltorch leaves it. The torch executor claims every op with a torch function;
// the sdpa executor claims only attention, so it leaves these unclaimed.

func.func @forward(%x: !prims.tensor<2x4xf32, cpu>) -> !prims.tensor<f32, cpu> {
  %0 = "ltorch.gelu"(%x) <{approximate = "none"}> : (!prims.tensor<2x4xf32, cpu>) -> !prims.tensor<2x4xf32, cpu>
  %1 = "ltorch.sum"(%0) <{keepdim = false}> : (!prims.tensor<2x4xf32, cpu>) -> !prims.tensor<f32, cpu>
  func.return %1 : !prims.tensor<f32, cpu>
}

// CHECK-LABEL: func.func @forward
// CHECK-NEXT:  %[[G:.*]] = "ltorch.gelu"(%x) <{approximate = "none"}> {fusion.claimed = #fusion.executor<"torch">}
// CHECK-NEXT:  %[[S:.*]] = "ltorch.sum"(%[[G]]) <{keepdim = false}> {fusion.claimed = #fusion.executor<"torch">}
// CHECK-NEXT:  func.return %[[S]]

// SDPA-LABEL: func.func @forward
// SDPA-NOT:   claimed
// SDPA:       func.return
