// RUN: thunder-ir-opt -p 'ddp-allreduce{params=1,2 world=2}' %s | filecheck %s --check-prefix=ONE
// RUN: thunder-ir-opt -p 'ddp-allreduce{params=1,2 world=2 bucket_bytes=256}' %s | filecheck %s --check-prefix=TWO

// The gradients of the parameters (forward inputs 1 and 2) are averaged across the
// processes inside @backward: each bucket's all-reduce starts right after its last
// gradient is computed, its wait comes before the return; the waited sum is divided by
// the world size and split back into the gradients' shapes.

func.func @backward(%x: !prims.tensor<4x8xf32, cpu>, %ct: !prims.tensor<4x16xf32, cpu>) -> (!prims.tensor<16x8xf32, cpu>, !prims.tensor<16xf32, cpu>) attributes {autograd.layout = #autograd.backward<inputs = 3, outputs = 1, residuals = 1, grad_inputs = [1, 2], ct_outputs = [0], reaches = [[0], [0]]>} {
  %ctt = "prims.transpose"(%ct) <{permutation = array<i64: 1, 0>}> : (!prims.tensor<4x16xf32, cpu>) -> !prims.tensor<16x4xf32, cpu>
  %gw = "prims.matmul"(%ctt, %x) : (!prims.tensor<16x4xf32, cpu>, !prims.tensor<4x8xf32, cpu>) -> !prims.tensor<16x8xf32, cpu>
  %gb = "prims.sum"(%ct) <{dims = array<i64: 0>}> : (!prims.tensor<4x16xf32, cpu>) -> !prims.tensor<16xf32, cpu>
  func.return %gw, %gb : !prims.tensor<16x8xf32, cpu>, !prims.tensor<16xf32, cpu>
}

// One bucket of 144 floats: flattened, joined, reduced in place (donated).
// ONE:      %gb = "prims.sum"(%ct)
// ONE-NEXT: %0 = "prims.reshape"(%gw) <{shape = array<i64: 128>}>
// ONE-NEXT: %1 = "prims.reshape"(%gb) <{shape = array<i64: 16>}>
// ONE-NEXT: %2 = "prims.cat"(%0, %1) <{dim = 0 : i64}>
// ONE-NEXT: %3 = "dist.all_reduce"(%2) <{reduce = "sum", group = "world", donated = true}> : (!prims.tensor<144xf32, cpu>) -> !dist.pending<!prims.tensor<144xf32, cpu>>
// ONE-NEXT: %4 = "prims.constant"() <{value = 2.000000e+00 : f64}>
// ONE-NEXT: %5 = "dist.wait"(%3)
// ONE-NEXT: %6 = "prims.div"(%5, %4)
// ONE-NEXT: %7 = "prims.slice"(%6) <{start_indices = array<i64: 0>, end_indices = array<i64: 128>, strides = array<i64: 1>}>
// ONE-NEXT: %8 = "prims.reshape"(%7) <{shape = array<i64: 16, 8>}>
// ONE-NEXT: %9 = "prims.slice"(%6) <{start_indices = array<i64: 128>, end_indices = array<i64: 144>, strides = array<i64: 1>}>
// ONE-NEXT: %10 = "prims.reshape"(%9) <{shape = array<i64: 16>}>
// ONE-NEXT: func.return %8, %10

// Buckets of at most 256 bytes: the weight's gradient starts before the bias's is
// computed, so its communication overlaps that computation.
// TWO:      %gw = "prims.matmul"(%ctt, %x)
// TWO-NEXT: %0 = "prims.reshape"(%gw) <{shape = array<i64: 128>}>
// TWO-NEXT: %1 = "dist.all_reduce"(%0) <{reduce = "sum", group = "world", donated = false}>
// TWO-NEXT: %gb = "prims.sum"(%ct)
// TWO-NEXT: %2 = "prims.reshape"(%gb) <{shape = array<i64: 16>}>
// TWO-NEXT: %3 = "dist.all_reduce"(%2)
// TWO:      "dist.wait"(%1)
// TWO:      "dist.wait"(%3)
// TWO:      func.return
