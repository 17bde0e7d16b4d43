package transparency

import (
	"fmt"
	"syscall"
	"testing"
)

// reservePort binds a TCP socket to a free loopback port and does not
// listen on it, until t ends: a connection to the port is refused, and no
// other socket may bind it meanwhile (neither sets SO_REUSEADDR). A port
// found free and closed again (a listener on port 0) can be taken by the
// next redis-server a parallel test starts on a free port: CI run 87 saw
// a "dead" redsync pool answer GET with nothing, as a live server does,
// once (TestTransparencyRedsyncFailingPools: "node 4 taken" where the
// unwatched run saw "node 4 unreachable").
func reservePort(t *testing.T) (int, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return 0, fmt.Errorf("reserve a port: socket: %w", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		_ = syscall.Close(fd)
		return 0, fmt.Errorf("reserve a port: bind: %w", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		_ = syscall.Close(fd)
		return 0, fmt.Errorf("reserve a port: getsockname: %w", err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	return sa.(*syscall.SockaddrInet4).Port, nil
}
