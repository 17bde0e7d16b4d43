package testredis

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// redialWait bounds how long VerifyTestMain waits for go-redis's redial
// goroutines to end.
const redialWait = 3 * time.Second

// VerifyTestMain runs the package's tests and then fails the run if any
// goroutine is left, as goleak.VerifyTestMain does, after waiting (up to
// a few seconds) for go-redis's redial goroutines: once a pool has failed
// to dial a dead server PoolSize times, go-redis redials it in the
// background, sleeping a second between attempts, and that goroutine ends
// at its next wake after the client is closed. A client never closed
// keeps it: it is still reported.
func VerifyTestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		waitRedialers(redialWait)
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func waitRedialers(max time.Duration) {
	deadline := time.Now().Add(max)
	buf := make([]byte, 1<<20)
	for time.Now().Before(deadline) {
		n := runtime.Stack(buf, true)
		if !bytes.Contains(buf[:n], []byte("(*ConnPool).tryDial")) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
