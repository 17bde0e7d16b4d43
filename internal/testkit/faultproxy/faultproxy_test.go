package faultproxy

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// echoServer is a TCP server that writes back what it reads.
type echoServer struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex // guards conns and ends
	conns []net.Conn
	ends  []error // how each connection's read loop ended
}

func startEcho(t testing.TB) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: got %v, want nil", err)
	}
	s := &echoServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				_, err := io.Copy(c, c)
				s.mu.Lock()
				s.ends = append(s.ends, err)
				s.mu.Unlock()
				_ = c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *echoServer) endings() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.ends...)
}

func newProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatalf("New(%q) = %v, want nil", target, err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close() = %v, want nil", err)
		}
	})
	return p
}

func dial(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatalf("dial %s: got %v, want nil", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// roundTrip writes msg on c and reads len(msg) bytes back within wait.
func roundTrip(c net.Conn, msg string, wait time.Duration) (string, error) {
	if err := c.SetDeadline(time.Now().Add(wait)); err != nil {
		return "", err
	}
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	buf := make([]byte, len(msg))
	n, err := io.ReadFull(c, buf)
	return string(buf[:n]), err
}

func TestForwardsBothWays(t *testing.T) {
	echo := startEcho(t)
	p := newProxy(t, echo.ln.Addr().String())
	if p.Target() != echo.ln.Addr().String() {
		t.Errorf("Target() = %q, want %q", p.Target(), echo.ln.Addr().String())
	}
	c := dial(t, p.Addr())
	for _, msg := range []string{"PING\r\n", "hello", string(make([]byte, 200<<10))} {
		got, err := roundTrip(c, msg, 5*time.Second)
		if err != nil || got != msg {
			t.Fatalf("round trip of %d bytes = (%d bytes, %v), want them back", len(msg), len(got), err)
		}
	}
	// The writer counts a chunk after its Write returns, so the echo can
	// reach the client before the last chunk is counted: wait for it.
	const want = 2 * (6 + 5 + 200<<10)
	st := p.Stats()
	for deadline := time.Now().Add(5 * time.Second); st.Forwarded < want && time.Now().Before(deadline); st = p.Stats() {
		time.Sleep(time.Millisecond)
	}
	if st.Accepted != 1 || st.Dropped != 0 || st.Forwarded != want {
		t.Errorf("Stats() = %+v, want 1 accepted, nothing dropped, every byte forwarded both ways", st)
	}
	if n := p.Conns(); n != 1 {
		t.Errorf("Conns() = %d, want 1", n)
	}
}

// TestLatency checks the lower bound only: a loaded machine may add more.
func TestLatency(t *testing.T) {
	echo := startEcho(t)
	p := newProxy(t, echo.ln.Addr().String())
	c := dial(t, p.Addr())
	const up, down = 40 * time.Millisecond, 60 * time.Millisecond
	p.SetLatency(Upstream, up)
	p.SetLatency(Downstream, down)
	for i := 0; i < 3; i++ {
		start := time.Now()
		if got, err := roundTrip(c, "x", 5*time.Second); err != nil || got != "x" {
			t.Fatalf("round trip = (%q, %v), want (\"x\", nil)", got, err)
		}
		if rtt := time.Since(start); rtt < up+down {
			t.Errorf("round trip with latency %v up and %v down took %v, want at least %v", up, down, rtt, up+down)
		}
	}
	p.SetLatency(Upstream, 0)
	p.SetLatency(Downstream, -time.Second)
	start := time.Now()
	if got, err := roundTrip(c, "y", 5*time.Second); err != nil || got != "y" {
		t.Fatalf("round trip without latency = (%q, %v), want (\"y\", nil)", got, err)
	}
	t.Logf("round trip without latency: %v", time.Since(start))
}

// TestLatencyKeepsOrder sends many small writes under latency and expects
// them back in order.
func TestLatencyKeepsOrder(t *testing.T) {
	echo := startEcho(t)
	p := newProxy(t, echo.ln.Addr().String())
	p.SetLatency(Upstream, 5*time.Millisecond)
	c := dial(t, p.Addr())
	var want []byte
	for i := 0; i < 200; i++ {
		b := []byte{byte(i)}
		want = append(want, b...)
		if _, err := c.Write(b); err != nil {
			t.Fatalf("write %d: got %v, want nil", i, err)
		}
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read back: got %v, want nil", err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("byte %d = %d, want %d (order kept)", i, got[i], want[i])
		}
	}
}

func TestBlackhole(t *testing.T) {
	echo := startEcho(t)
	p := newProxy(t, echo.ln.Addr().String())
	c := dial(t, p.Addr())
	if _, err := roundTrip(c, "before", 5*time.Second); err != nil {
		t.Fatalf("round trip before the blackhole: got %v, want nil", err)
	}
	p.Blackhole(time.Hour)
	if !p.Blackholed() {
		t.Fatalf("Blackholed() = false during a blackhole, want true")
	}
	got, err := roundTrip(c, "lost", 200*time.Millisecond)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("round trip during the blackhole = (%q, %v), want a deadline error", got, err)
	}
	// A connection made during the blackhole is accepted but silent.
	c2 := dial(t, p.Addr())
	if got, err := roundTrip(c2, "new", 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("round trip on a new connection during the blackhole = (%q, %v), want a deadline error", got, err)
	}
	if st := p.Stats(); st.Dropped != int64(len("lost")+len("new")) {
		t.Errorf("Stats().Dropped = %d, want %d", st.Dropped, len("lost")+len("new"))
	}
	p.Blackhole(0)
	if p.Blackholed() {
		t.Fatalf("Blackholed() = true after Blackhole(0), want false")
	}
	// The connections survived; what was sent during the blackhole is gone.
	for _, cc := range []net.Conn{c, c2} {
		if got, err := roundTrip(cc, "after", 5*time.Second); err != nil || got != "after" {
			t.Errorf("round trip after the blackhole = (%q, %v), want (\"after\", nil)", got, err)
		}
	}
}

func TestBlackholeEndsByItself(t *testing.T) {
	echo := startEcho(t)
	p := newProxy(t, echo.ln.Addr().String())
	c := dial(t, p.Addr())
	const d = 150 * time.Millisecond
	start := time.Now()
	p.Blackhole(d)
	for p.Blackholed() {
		time.Sleep(5 * time.Millisecond)
	}
	if el := time.Since(start); el < d {
		t.Errorf("blackhole of %v ended after %v, want at least %v", d, el, d)
	}
	if got, err := roundTrip(c, "x", 5*time.Second); err != nil || got != "x" {
		t.Errorf("round trip after the blackhole = (%q, %v), want (\"x\", nil)", got, err)
	}
}

func TestReset(t *testing.T) {
	echo := startEcho(t)
	p := newProxy(t, echo.ln.Addr().String())
	c := dial(t, p.Addr())
	if _, err := roundTrip(c, "before", 5*time.Second); err != nil {
		t.Fatalf("round trip before the reset: got %v, want nil", err)
	}
	if n := p.Reset(); n != 1 {
		t.Fatalf("Reset() = %d, want 1", n)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("read after Reset: got %v, want ECONNRESET", err)
	}
	// The server's side was closed too (how its reader sees the RST, an
	// error or EOF, depends on how it reads).
	deadline := time.Now().Add(5 * time.Second)
	for len(echo.endings()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if ends := echo.endings(); len(ends) != 1 {
		t.Errorf("server side after Reset: got %d connections ended, want 1", len(ends))
	}
	// New connections work.
	c2 := dial(t, p.Addr())
	if got, err := roundTrip(c2, "after", 5*time.Second); err != nil || got != "after" {
		t.Errorf("round trip on a new connection after Reset = (%q, %v), want (\"after\", nil)", got, err)
	}
	if st := p.Stats(); st.Reset != 1 || st.Accepted != 2 {
		t.Errorf("Stats() = %+v, want 1 reset, 2 accepted", st)
	}
	for p.Conns() != 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := p.Conns(); n != 1 {
		t.Errorf("Conns() after a reset and a new connection = %d, want 1", n)
	}
}

// TestHalfClose: a client that closes its writing side gets what the
// server still sends, then EOF.
func TestHalfClose(t *testing.T) {
	echo := startEcho(t)
	p := newProxy(t, echo.ln.Addr().String())
	c := dial(t, p.Addr())
	if _, err := c.Write([]byte("bye")); err != nil {
		t.Fatalf("write: got %v, want nil", err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatalf("CloseWrite: got %v, want nil", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "bye" {
		t.Errorf("read to EOF after a half close = (%q, %v), want (\"bye\", nil)", got, err)
	}
}

// TestTargetDown: a connection to a proxy whose target refuses is closed.
func TestTargetDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: got %v, want nil", err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	p := newProxy(t, addr)
	c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		return // reset before the dial returned: closed, as wanted
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read through a proxy whose target is down = (%d, %v), want the connection closed", n, err)
	}
}

// TestClose: Close ends open connections, is idempotent, and refuses new
// ones; goleak (TestMain) checks that no goroutine is left.
func TestClose(t *testing.T) {
	echo := startEcho(t)
	p, err := New(echo.ln.Addr().String())
	if err != nil {
		t.Fatalf("New = %v, want nil", err)
	}
	c := dial(t, p.Addr())
	p.SetLatency(Downstream, time.Hour) // a writer asleep must not hold Close up
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatalf("write: got %v, want nil", err)
	}
	time.Sleep(20 * time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Close() = %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("Close() did not return within 5s")
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close() = %v, want nil", err)
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Errorf("dial after Close: got a connection, want refused")
	}
}

func TestDirectionString(t *testing.T) {
	for d, want := range map[Direction]string{Upstream: "upstream", Downstream: "downstream", 7: "Direction(7)"} {
		if got := d.String(); got != want {
			t.Errorf("Direction(%d).String() = %q, want %q", uint8(d), got, want)
		}
	}
}
