// validation/emulation/fiber_switch.cpp — the context switch of the scan emulation's
// fibers on x86-64 (emulation.cuh, MC_EMU_FAST_SWITCH): glibc's swapcontext saves and
// restores the signal mask with a system call at every switch, and the emulated kernels
// switch at every barrier and twice per warp shuffle. With it, 9 parity cases took 99 s
// (51 s in the kernel); with this switch, 10.8 s, and the same bytes. This switch keeps
// only what the System V ABI asks a callee to preserve: rbx, rbp, r12-r15, the stack
// pointer, MXCSR and the x87 control word.
//
// extern "C" void mc_emu_switch(void** save_sp, void* load_sp);
//   rdi = save_sp: where the suspended context's stack pointer goes
//   rsi = load_sp: the stack pointer of the context to resume (a frame this function
//                  pushed, or one make_context in emulation.cuh built the same way)
#if defined(__x86_64__) && !defined(MC_EMU_UCONTEXT)
asm(R"(
    .text
    .globl mc_emu_switch
    .type mc_emu_switch, @function
mc_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size mc_emu_switch, .-mc_emu_switch
    .section .note.GNU-stack,"",@progbits
)");
#endif
