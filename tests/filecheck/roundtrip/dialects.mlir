// RUN: thunder-ir-opt %s | thunder-ir-opt --print-op-generic | thunder-ir-opt | filecheck %s

// The other dialects: ltorch ops with params, source locations (`loc(...)`, xDSL's own)
// and an executor's `fusion.claimed` mark, an opaque torch.call with kwargs, and a
// fusion.region whose body holds an RNG prim. Value names survive the round trip.

func.func @dialects(%x: !prims.tensor<4x8xf32, cpu>, %w: !prims.tensor<16x8xf32, cpu>, %seed: !prims.number<i64>) -> (!prims.tensor<4x16xf32, cpu>, !prims.tensor<4x8xf32, cpu>, !prims.tensor<4x8xf32, cpu>) {
  %0 = "ltorch.add"(%x, %x) <{alpha = 2 : i64}> : (!prims.tensor<4x8xf32, cpu>, !prims.tensor<4x8xf32, cpu>) -> !prims.tensor<4x8xf32, cpu> loc("model.py":3:0)
  %1 = "ltorch.linear"(%0, %w) {fusion.claimed = #fusion.executor<"torch">} : (!prims.tensor<4x8xf32, cpu>, !prims.tensor<16x8xf32, cpu>) -> !prims.tensor<4x16xf32, cpu> loc("model.py":4:0)
  %2 = "torch.call"(%0) <{callee = "torch.nn.functional.softmax", args = [#prims.operand<0>], kwargs = {dim = -1 : i64}}> : (!prims.tensor<4x8xf32, cpu>) -> !prims.tensor<4x8xf32, cpu>
  %3 = "fusion.region"(%0, %seed) <{executor = "torch_compile", kernel = "fusion0"}> ({
  ^bb0(%a: !prims.tensor<4x8xf32, cpu>, %s: !prims.number<i64>):
    %u = "prims.bernoulli"() <{shape = array<i64: 4, 8>, p = 5.000000e-01 : f64, device = "cpu", dtype = f32}> : () -> !prims.tensor<4x8xf32, cpu>
    %m = "prims.mul"(%a, %u) : (!prims.tensor<4x8xf32, cpu>, !prims.tensor<4x8xf32, cpu>) -> !prims.tensor<4x8xf32, cpu>
    "fusion.yield"(%m) : (!prims.tensor<4x8xf32, cpu>) -> ()
  }) : (!prims.tensor<4x8xf32, cpu>, !prims.number<i64>) -> !prims.tensor<4x8xf32, cpu>
  func.return %1, %2, %3 : !prims.tensor<4x16xf32, cpu>, !prims.tensor<4x8xf32, cpu>, !prims.tensor<4x8xf32, cpu>
}

// CHECK: builtin.module {
// CHECK-NEXT: func.func @dialects(%x: !prims.tensor<4x8xf32, cpu>, %w: !prims.tensor<16x8xf32, cpu>, %seed: !prims.number<i64>) -> (!prims.tensor<4x16xf32, cpu>, !prims.tensor<4x8xf32, cpu>, !prims.tensor<4x8xf32, cpu>) {
// CHECK-NEXT: %0 = "ltorch.add"(%x, %x) <{alpha = 2 : i64}> : (!prims.tensor<4x8xf32, cpu>, !prims.tensor<4x8xf32, cpu>) -> !prims.tensor<4x8xf32, cpu> loc("model.py":3:0)
// CHECK-NEXT: %1 = "ltorch.linear"(%0, %w) {fusion.claimed = #fusion.executor<"torch">} : (!prims.tensor<4x8xf32, cpu>, !prims.tensor<16x8xf32, cpu>) -> !prims.tensor<4x16xf32, cpu> loc("model.py":4:0)
// CHECK-NEXT: %2 = "torch.call"(%0) <{callee = "torch.nn.functional.softmax", args = [#prims.operand<0>], kwargs = {dim = -1 : i64}}> : (!prims.tensor<4x8xf32, cpu>) -> !prims.tensor<4x8xf32, cpu>
// CHECK-NEXT: %3 = "fusion.region"(%0, %seed) <{executor = "torch_compile", kernel = "fusion0"}> ({
// CHECK-NEXT: ^bb0(%a: !prims.tensor<4x8xf32, cpu>, %s: !prims.number<i64>):
// CHECK-NEXT: %u = "prims.bernoulli"() <{shape = array<i64: 4, 8>, p = 5.000000e-01 : f64, device = "cpu", dtype = f32}> : () -> !prims.tensor<4x8xf32, cpu>
// CHECK-NEXT: %m = "prims.mul"(%a, %u) : (!prims.tensor<4x8xf32, cpu>, !prims.tensor<4x8xf32, cpu>) -> !prims.tensor<4x8xf32, cpu>
// CHECK-NEXT: "fusion.yield"(%m) : (!prims.tensor<4x8xf32, cpu>) -> ()
// CHECK-NEXT: }) : (!prims.tensor<4x8xf32, cpu>, !prims.number<i64>) -> !prims.tensor<4x8xf32, cpu>
// CHECK-NEXT: func.return %1, %2, %3 : !prims.tensor<4x16xf32, cpu>, !prims.tensor<4x8xf32, cpu>, !prims.tensor<4x8xf32, cpu>
// CHECK-NEXT: }
// CHECK-NEXT: }
