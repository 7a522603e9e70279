// RUN: thunder-ir-opt %s | thunder-ir-opt --print-op-generic | thunder-ir-opt | filecheck %s

// Every family of prims, printed (custom and generic forms), parsed back and printed
// again: the text is stable.
// Also one torch.call (an opaque call with #prims.operand references).

builtin.module {
  func.func @prims_tour(%x: !prims.tensor<2x3xf32, cpu>, %y: !prims.tensor<3x4xf32, cpu>, %idx: !prims.tensor<2xi64, cpu>, %w: !prims.tensor<4x3xf32, cpu>) -> (!prims.tensor<2x3xbf16, cpu>, !prims.tensor<3x2x4xf32, cpu>, !prims.tensor<2x1xf32, cpu>, !prims.tensor<3xf32, cpu>, !prims.tensor<4x4xf32, cpu>, !prims.tensor<4x3xf32, cpu>, !prims.tensor<2x3xf32, cpu>, !prims.tensor<2xf32, cpu>, !prims.tensor<f32, cpu>, !prims.tensor<2xf32, cpu>, !prims.tensor<2xi64, cpu>, !prims.tensor<2x4xf32, cpu>, !prims.tensor<2x4xf32, cpu>, !prims.tensor<2x4xf32, cpu>, !prims.tensor<5xi64, cpu>, !prims.tensor<2x3xf32, cpu>, !prims.tensor<2x2xf32, cpu>, !prims.tensor<2x2xf32, cpu>, !prims.tensor<3x4xf32, cpu>, !prims.tensor<2x3xf32, cpu>) {
    %0 = "prims.constant"() <{value = 2.500000e+00 : f64}> : () -> !prims.number<f64>
    %1 = "prims.constant"() <{value = 3 : i64}> : () -> !prims.number<i64>
    %2 = "prims.constant"() <{value = true}> : () -> !prims.number<i1>
    %3 = "prims.exp"(%x) : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
    %4 = "prims.neg"(%3) : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
    %5 = "prims.isnan"(%4) : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xi1, cpu>
    %6 = "prims.mul"(%4, %0) : (!prims.tensor<2x3xf32, cpu>, !prims.number<f64>) -> !prims.tensor<2x3xf32, cpu>
    %7 = "prims.add"(%6, %1) : (!prims.tensor<2x3xf32, cpu>, !prims.number<i64>) -> !prims.tensor<2x3xf32, cpu>
    %8 = "prims.div"(%7, %x) : (!prims.tensor<2x3xf32, cpu>, !prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
    %9 = "prims.sub"(%0, %8) : (!prims.number<f64>, !prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
    %10 = "prims.where"(%5, %9, %x) : (!prims.tensor<2x3xi1, cpu>, !prims.tensor<2x3xf32, cpu>, !prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
    %11 = "prims.convert_element_type"(%10) <{dtype = bf16}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xbf16, cpu>
    %12 = "prims.reshape"(%x) <{shape = array<i64: 2, 1, 3>}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x1x3xf32, cpu>
    %13 = "prims.broadcast_in_dim"(%12) <{shape = array<i64: 2, 4, 3>, broadcast_dims = array<i64: 0, 1, 2>}> : (!prims.tensor<2x1x3xf32, cpu>) -> !prims.tensor<2x4x3xf32, cpu>
    %14 = "prims.transpose"(%13) <{permutation = array<i64: 2, 0, 1>}> : (!prims.tensor<2x4x3xf32, cpu>) -> !prims.tensor<3x2x4xf32, cpu>
    %15 = "prims.slice"(%x) <{start_indices = array<i64: 0, 1>, end_indices = array<i64: 2, 3>, strides = array<i64: 1, 2>}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x1xf32, cpu>
    %16 = "prims.slice"(%x) <{start_indices = array<i64: 0, 0>, end_indices = array<i64: 1, 3>}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<1x3xf32, cpu>
    %17 = "prims.squeeze"(%16) <{dims = array<i64: 0>}> : (!prims.tensor<1x3xf32, cpu>) -> !prims.tensor<3xf32, cpu>
    %18 = "prims.pad"(%x) <{padding_value = 0.000000e+00 : f64, padding_config = [array<i64: 1, 1, 0>, array<i64: 0, -1, 1>]}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<4x4xf32, cpu>
    %19 = "prims.cat"(%x, %x) <{dim = 0 : i64}> : (!prims.tensor<2x3xf32, cpu>, !prims.tensor<2x3xf32, cpu>) -> !prims.tensor<4x3xf32, cpu>
    %20 = "prims.flip"(%x) <{dims = array<i64: 1>}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
    %21 = "prims.sum"(%x) <{dims = array<i64: 1>}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2xf32, cpu>
    %22 = "prims.amax"(%x) <{dims = array<i64: 0, 1>}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<f32, cpu>
    %23 = "prims.var"(%x) <{dims = array<i64: 1>, correction = 0 : i64}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2xf32, cpu>
    %24 = "prims.argmax"(%x) <{dim = 1 : i64}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2xi64, cpu>
    %25 = "prims.matmul"(%x, %y) : (!prims.tensor<2x3xf32, cpu>, !prims.tensor<3x4xf32, cpu>) -> !prims.tensor<2x4xf32, cpu>
    %26 = "prims.linear"(%x, %w) : (!prims.tensor<2x3xf32, cpu>, !prims.tensor<4x3xf32, cpu>) -> !prims.tensor<2x4xf32, cpu>
    %27 = "prims.full"() <{shape = array<i64: 4>, fill_value = 1.000000e+00 : f64, device = "cpu", dtype = f32}> : () -> !prims.tensor<4xf32, cpu>
    %28 = "prims.linear"(%x, %w, %27) : (!prims.tensor<2x3xf32, cpu>, !prims.tensor<4x3xf32, cpu>, !prims.tensor<4xf32, cpu>) -> !prims.tensor<2x4xf32, cpu>
    %29 = "prims.iota"() <{length = 5 : i64, start = 0 : i64, step = 2 : i64, device = "cpu", dtype = i64}> : () -> !prims.tensor<5xi64, cpu>
    %30 = "prims.bernoulli"() <{shape = array<i64: 2, 3>, p = 5.000000e-01 : f64, device = "cpu", dtype = f32}> : () -> !prims.tensor<2x3xf32, cpu>
    %31 = "prims.take"(%x, %idx) <{dim = 1 : i64}> : (!prims.tensor<2x3xf32, cpu>, !prims.tensor<2xi64, cpu>) -> !prims.tensor<2x2xf32, cpu>
    %32 = "prims.full"() <{shape = array<i64: 2, 2>, fill_value = 0 : i64, device = "cpu", dtype = i64}> : () -> !prims.tensor<2x2xi64, cpu>
    %33 = "prims.gather"(%x, %32) <{dim = 1 : i64}> : (!prims.tensor<2x3xf32, cpu>, !prims.tensor<2x2xi64, cpu>) -> !prims.tensor<2x2xf32, cpu>
    %34 = "prims.full"() <{shape = array<i64: 2, 4>, fill_value = 1.000000e+00 : f64, device = "cpu", dtype = f32}> : () -> !prims.tensor<2x4xf32, cpu>
    %35 = "prims.index_add"(%y, %idx, %34) <{dim = 0 : i64}> : (!prims.tensor<3x4xf32, cpu>, !prims.tensor<2xi64, cpu>, !prims.tensor<2x4xf32, cpu>) -> !prims.tensor<3x4xf32, cpu>
    %36 = "torch.call"(%x) <{callee = "torch.nn.functional.softmax", args = [#prims.operand<0>], kwargs = {dim = -1 : i64}}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
    func.return %11, %14, %15, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %28, %29, %30, %31, %33, %35, %36 : !prims.tensor<2x3xbf16, cpu>, !prims.tensor<3x2x4xf32, cpu>, !prims.tensor<2x1xf32, cpu>, !prims.tensor<3xf32, cpu>, !prims.tensor<4x4xf32, cpu>, !prims.tensor<4x3xf32, cpu>, !prims.tensor<2x3xf32, cpu>, !prims.tensor<2xf32, cpu>, !prims.tensor<f32, cpu>, !prims.tensor<2xf32, cpu>, !prims.tensor<2xi64, cpu>, !prims.tensor<2x4xf32, cpu>, !prims.tensor<2x4xf32, cpu>, !prims.tensor<2x4xf32, cpu>, !prims.tensor<5xi64, cpu>, !prims.tensor<2x3xf32, cpu>, !prims.tensor<2x2xf32, cpu>, !prims.tensor<2x2xf32, cpu>, !prims.tensor<3x4xf32, cpu>, !prims.tensor<2x3xf32, cpu>
  }
}

// CHECK: builtin.module {
// CHECK-NEXT: func.func @prims_tour(%x: !prims.tensor<2x3xf32, cpu>, %y: !prims.tensor<3x4xf32, cpu>, %idx: !prims.tensor<2xi64, cpu>, %w: !prims.tensor<4x3xf32, cpu>) -> (!prims.tensor<2x3xbf16, cpu>, !prims.tensor<3x2x4xf32, cpu>, !prims.tensor<2x1xf32, cpu>, !prims.tensor<3xf32, cpu>, !prims.tensor<4x4xf32, cpu>, !prims.tensor<4x3xf32, cpu>, !prims.tensor<2x3xf32, cpu>, !prims.tensor<2xf32, cpu>, !prims.tensor<f32, cpu>, !prims.tensor<2xf32, cpu>, !prims.tensor<2xi64, cpu>, !prims.tensor<2x4xf32, cpu>, !prims.tensor<2x4xf32, cpu>, !prims.tensor<2x4xf32, cpu>, !prims.tensor<5xi64, cpu>, !prims.tensor<2x3xf32, cpu>, !prims.tensor<2x2xf32, cpu>, !prims.tensor<2x2xf32, cpu>, !prims.tensor<3x4xf32, cpu>, !prims.tensor<2x3xf32, cpu>) {
// CHECK-NEXT: %0 = "prims.constant"() <{value = 2.500000e+00 : f64}> : () -> !prims.number<f64>
// CHECK-NEXT: %1 = "prims.constant"() <{value = 3 : i64}> : () -> !prims.number<i64>
// CHECK-NEXT: %2 = "prims.constant"() <{value = true}> : () -> !prims.number<i1>
// CHECK-NEXT: %3 = "prims.exp"(%x) : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
// CHECK-NEXT: %4 = "prims.neg"(%3) : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
// CHECK-NEXT: %5 = "prims.isnan"(%4) : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xi1, cpu>
// CHECK-NEXT: %6 = "prims.mul"(%4, %0) : (!prims.tensor<2x3xf32, cpu>, !prims.number<f64>) -> !prims.tensor<2x3xf32, cpu>
// CHECK-NEXT: %7 = "prims.add"(%6, %1) : (!prims.tensor<2x3xf32, cpu>, !prims.number<i64>) -> !prims.tensor<2x3xf32, cpu>
// CHECK-NEXT: %8 = "prims.div"(%7, %x) : (!prims.tensor<2x3xf32, cpu>, !prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
// CHECK-NEXT: %9 = "prims.sub"(%0, %8) : (!prims.number<f64>, !prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
// CHECK-NEXT: %10 = "prims.where"(%5, %9, %x) : (!prims.tensor<2x3xi1, cpu>, !prims.tensor<2x3xf32, cpu>, !prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
// CHECK-NEXT: %11 = "prims.convert_element_type"(%10) <{dtype = bf16}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xbf16, cpu>
// CHECK-NEXT: %12 = "prims.reshape"(%x) <{shape = array<i64: 2, 1, 3>}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x1x3xf32, cpu>
// CHECK-NEXT: %13 = "prims.broadcast_in_dim"(%12) <{shape = array<i64: 2, 4, 3>, broadcast_dims = array<i64: 0, 1, 2>}> : (!prims.tensor<2x1x3xf32, cpu>) -> !prims.tensor<2x4x3xf32, cpu>
// CHECK-NEXT: %14 = "prims.transpose"(%13) <{permutation = array<i64: 2, 0, 1>}> : (!prims.tensor<2x4x3xf32, cpu>) -> !prims.tensor<3x2x4xf32, cpu>
// CHECK-NEXT: %15 = "prims.slice"(%x) <{start_indices = array<i64: 0, 1>, end_indices = array<i64: 2, 3>, strides = array<i64: 1, 2>}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x1xf32, cpu>
// CHECK-NEXT: %16 = "prims.slice"(%x) <{start_indices = array<i64: 0, 0>, end_indices = array<i64: 1, 3>}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<1x3xf32, cpu>
// CHECK-NEXT: %17 = "prims.squeeze"(%16) <{dims = array<i64: 0>}> : (!prims.tensor<1x3xf32, cpu>) -> !prims.tensor<3xf32, cpu>
// CHECK-NEXT: %18 = "prims.pad"(%x) <{padding_value = 0.000000e+00 : f64, padding_config = [array<i64: 1, 1, 0>, array<i64: 0, -1, 1>]}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<4x4xf32, cpu>
// CHECK-NEXT: %19 = "prims.cat"(%x, %x) <{dim = 0 : i64}> : (!prims.tensor<2x3xf32, cpu>, !prims.tensor<2x3xf32, cpu>) -> !prims.tensor<4x3xf32, cpu>
// CHECK-NEXT: %20 = "prims.flip"(%x) <{dims = array<i64: 1>}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
// CHECK-NEXT: %21 = "prims.sum"(%x) <{dims = array<i64: 1>}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2xf32, cpu>
// CHECK-NEXT: %22 = "prims.amax"(%x) <{dims = array<i64: 0, 1>}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<f32, cpu>
// CHECK-NEXT: %23 = "prims.var"(%x) <{dims = array<i64: 1>, correction = 0 : i64}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2xf32, cpu>
// CHECK-NEXT: %24 = "prims.argmax"(%x) <{dim = 1 : i64}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2xi64, cpu>
// CHECK-NEXT: %25 = "prims.matmul"(%x, %y) : (!prims.tensor<2x3xf32, cpu>, !prims.tensor<3x4xf32, cpu>) -> !prims.tensor<2x4xf32, cpu>
// CHECK-NEXT: %26 = "prims.linear"(%x, %w) : (!prims.tensor<2x3xf32, cpu>, !prims.tensor<4x3xf32, cpu>) -> !prims.tensor<2x4xf32, cpu>
// CHECK-NEXT: %27 = "prims.full"() <{shape = array<i64: 4>, fill_value = 1.000000e+00 : f64, device = "cpu", dtype = f32}> : () -> !prims.tensor<4xf32, cpu>
// CHECK-NEXT: %28 = "prims.linear"(%x, %w, %27) : (!prims.tensor<2x3xf32, cpu>, !prims.tensor<4x3xf32, cpu>, !prims.tensor<4xf32, cpu>) -> !prims.tensor<2x4xf32, cpu>
// CHECK-NEXT: %29 = "prims.iota"() <{length = 5 : i64, start = 0 : i64, step = 2 : i64, device = "cpu", dtype = i64}> : () -> !prims.tensor<5xi64, cpu>
// CHECK-NEXT: %30 = "prims.bernoulli"() <{shape = array<i64: 2, 3>, p = 5.000000e-01 : f64, device = "cpu", dtype = f32}> : () -> !prims.tensor<2x3xf32, cpu>
// CHECK-NEXT: %31 = "prims.take"(%x, %idx) <{dim = 1 : i64}> : (!prims.tensor<2x3xf32, cpu>, !prims.tensor<2xi64, cpu>) -> !prims.tensor<2x2xf32, cpu>
// CHECK-NEXT: %32 = "prims.full"() <{shape = array<i64: 2, 2>, fill_value = 0 : i64, device = "cpu", dtype = i64}> : () -> !prims.tensor<2x2xi64, cpu>
// CHECK-NEXT: %33 = "prims.gather"(%x, %32) <{dim = 1 : i64}> : (!prims.tensor<2x3xf32, cpu>, !prims.tensor<2x2xi64, cpu>) -> !prims.tensor<2x2xf32, cpu>
// CHECK-NEXT: %34 = "prims.full"() <{shape = array<i64: 2, 4>, fill_value = 1.000000e+00 : f64, device = "cpu", dtype = f32}> : () -> !prims.tensor<2x4xf32, cpu>
// CHECK-NEXT: %35 = "prims.index_add"(%y, %idx, %34) <{dim = 0 : i64}> : (!prims.tensor<3x4xf32, cpu>, !prims.tensor<2xi64, cpu>, !prims.tensor<2x4xf32, cpu>) -> !prims.tensor<3x4xf32, cpu>
// CHECK-NEXT: %36 = "torch.call"(%x) <{callee = "torch.nn.functional.softmax", args = [#prims.operand<0>], kwargs = {dim = -1 : i64}}> : (!prims.tensor<2x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
// CHECK-NEXT: func.return %11, %14, %15, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %28, %29, %30, %31, %33, %35, %36 : !prims.tensor<2x3xbf16, cpu>, !prims.tensor<3x2x4xf32, cpu>, !prims.tensor<2x1xf32, cpu>, !prims.tensor<3xf32, cpu>, !prims.tensor<4x4xf32, cpu>, !prims.tensor<4x3xf32, cpu>, !prims.tensor<2x3xf32, cpu>, !prims.tensor<2xf32, cpu>, !prims.tensor<f32, cpu>, !prims.tensor<2xf32, cpu>, !prims.tensor<2xi64, cpu>, !prims.tensor<2x4xf32, cpu>, !prims.tensor<2x4xf32, cpu>, !prims.tensor<2x4xf32, cpu>, !prims.tensor<5xi64, cpu>, !prims.tensor<2x3xf32, cpu>, !prims.tensor<2x2xf32, cpu>, !prims.tensor<2x2xf32, cpu>, !prims.tensor<3x4xf32, cpu>, !prims.tensor<2x3xf32, cpu>
// CHECK-NEXT: }
// CHECK-NEXT: }
