#include "textflag.h"

// func fpWalk(pcs []uintptr, stop *[stopPCs]uintptr) (n int, stopped bool)
//
// fpWalk writes into pcs the return addresses of the frames above its
// caller's caller, innermost first, as runtime.Callers(2, pcs) would from
// its caller (with the wrapper frames runtime.Callers leaves out), by
// following the frame pointers Go keeps on amd64. It stops when it has
// written an address that is one of stop's (zero entries match nothing;
// stopped is then true), when it reaches the bottom of the goroutine's
// stack (a zero frame pointer) or when pcs is full, and returns how many it
// wrote. It returns -(n+1) when it stopped at a frame pointer that cannot
// be a Go caller's (not above the current one, or more than a mebibyte
// above it): the caller must not trust the walk then.
TEXT ·fpWalk(SB),NOSPLIT,$0-41
	MOVQ pcs_base+0(FP), DI
	MOVQ pcs_len+8(FP), CX
	MOVQ stop+24(FP), SI
	MOVQ 0(SI), R9
	MOVQ 8(SI), R10
	MOVQ 16(SI), R11
	MOVQ 24(SI), R12
	MOVB $0, stopped+40(FP)
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
	CMPQ BX, R9
	JEQ hit
	CMPQ BX, R10
	JEQ hit
	CMPQ BX, R11
	JEQ hit
	CMPQ BX, R12
	JEQ hit
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
hit:
	MOVB $1, stopped+40(FP)
	JMP done
broken:
	NOTQ DX // -(n+1)
done:
	MOVQ DX, n+32(FP)
	RET
