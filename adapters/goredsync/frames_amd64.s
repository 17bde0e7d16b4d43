#include "textflag.h"

// func fpWalk(pcs []uintptr) int
//
// fpWalk writes into pcs the return addresses of the frames above its
// caller's caller, innermost first, as runtime.Callers(2, pcs) would from
// its caller (with the wrapper frames runtime.Callers leaves out), by
// following the frame pointers Go keeps on amd64. It returns how many it
// wrote when it reached the bottom of the goroutine's stack (a zero frame
// pointer) or filled pcs, and -(n+1) when it stopped at a frame pointer
// that cannot be a Go caller's (not above the current one, or more than a
// mebibyte above it): the caller must not trust the walk then.
TEXT ·fpWalk(SB),NOSPLIT,$0-32
	MOVQ pcs_base+0(FP), DI
	MOVQ pcs_len+8(FP), CX
	MOVQ BP, AX // the caller's frame pointer: fpWalk has no frame of its own
	XORQ DX, DX
	TESTQ AX, AX
	JZ done
	MOVQ 0(AX), AX // skip the caller's own return address
loop:
	TESTQ AX, AX
	JZ done
	CMPQ DX, CX
	JAE done
	MOVQ 8(AX), BX // the return address into the next caller
	MOVQ BX, (DI)(DX*8)
	INCQ DX
	MOVQ 0(AX), BX // the next frame pointer
	TESTQ BX, BX
	JZ done        // the bottom of the stack
	CMPQ BX, AX
	JBE broken
	MOVQ BX, R8
	SUBQ AX, R8
	CMPQ R8, $0x100000
	JA broken
	MOVQ BX, AX
	JMP loop
broken:
	NOTQ DX // -(n+1)
done:
	MOVQ DX, ret+24(FP)
	RET
