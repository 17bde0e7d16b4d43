package testredis

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Ports for servers are chosen at random below the kernel's ephemeral
// range, with the cluster bus port (the port + 10000) below it too, and
// reserved for the test that started the server, across every test
// process of the run, by a file in portDir. A port the kernel chose
// (net.Listen on port 0) stayed free for anyone once its server was
// killed: in CI run 156 (2026-11-30) a server that
// TestRedlockServersKilled killed answered "no such key" half a second
// later, from another package's server started on its port, and the
// test's check of the killed copy's cause saw ErrLockGone. Below the
// ephemeral range, no client socket's own port can be a server's either
// (a connection to a dead server's port cannot connect to itself).

const (
	busOffset = 10000 // redis-server's cluster bus port is the port + this
	portLow   = 10000 // the lowest port chosen
)

// portDir holds one file per reserved port, naming the process that
// reserved it.
var portDir = filepath.Join(os.TempDir(), "lockwatch-testredis-ports")

// reservePort returns a loopback port that no server of this run uses or
// used, reserved for t (released when t ends), with its bus port free as
// well. It falls back to a port the kernel chooses when the ephemeral
// range leaves no room below it.
func reservePort(t testing.TB) (int, error) {
	high := ephemeralLow() - busOffset
	if high-portLow < 1000 {
		return kernelPort()
	}
	if err := os.MkdirAll(portDir, 0o777); err != nil {
		return 0, err
	}
	for range 200 {
		port := portLow + rand.IntN(high-portLow)
		if !listenable(port) || !listenable(port+busOffset) {
			continue
		}
		if !reserve(port) {
			continue
		}
		if !reserve(port + busOffset) {
			release(port)
			continue
		}
		t.Cleanup(func() {
			release(port)
			release(port + busOffset)
		})
		return port, nil
	}
	return 0, errors.New("testredis: no free port found below the ephemeral range in 200 tries")
}

// ephemeralLow is the low end of the kernel's ephemeral port range
// (32768 when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	low, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return low
}

// listenable reports whether nothing listens on port now.
func listenable(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// reserve creates port's file, or takes it over from a process that no
// longer runs; it reports whether port is now this process's.
func reserve(port int) bool {
	name := filepath.Join(portDir, strconv.Itoa(port))
	for range 2 {
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
		if err == nil {
			_, _ = fmt.Fprintf(f, "%d\n", os.Getpid())
			_ = f.Close()
			return true
		}
		if !errors.Is(err, fs.ErrExist) || !abandoned(name) {
			return false
		}
		_ = os.Remove(name)
	}
	return false
}

// abandoned reports whether the process named in a reservation file no
// longer runs.
func abandoned(name string) bool {
	b, err := os.ReadFile(name)
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return false // being written, or not ours to judge
	}
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

func release(port int) { _ = os.Remove(filepath.Join(portDir, strconv.Itoa(port))) }

// kernelPort is a port the kernel chooses.
func kernelPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
