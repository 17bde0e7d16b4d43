package transparency

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestDeadAddrStaysDead: a dead pool's address refuses connections, and
// no server can take it while the test runs (as a redis-server a parallel
// test starts on a free port could before: see reservePort).
func TestDeadAddrStaysDead(t *testing.T) {
	addr := deadAddr(t)
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		_ = c.Close()
		t.Fatalf("dial %s: connected, want refused", addr)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial %s: %v, want connection refused", addr, err)
	}
	l, err := net.Listen("tcp", addr)
	if err == nil {
		_ = l.Close()
		t.Fatalf("listen on %s: a server could take the dead address while the test runs, want it refused", addr)
	}
	t.Logf("listen on %s: %v (as wanted)", addr, err)
}
