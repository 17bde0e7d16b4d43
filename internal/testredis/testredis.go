// Package testredis starts a real redis-server for tests.
//
// [Start] finds redis-server on PATH, runs it on a free loopback port with
// persistence off, waits until it answers PING, and stops it by pid when the
// test ends. Without redis-server the test is skipped, unless the
// environment sets LOCKWATCH_REQUIRE_REDIS=1 (as .ci/run does), where the
// absence fails the test.
//
// The package is internal: only lockwatch's own tests use it.
package testredis

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RequireEnv names the environment variable that turns a missing
// redis-server from a skip into a failure when set to "1".
const RequireEnv = "LOCKWATCH_REQUIRE_REDIS"

// StartTimeout bounds how long [Start] waits for a started server to answer PING.
const StartTimeout = 10 * time.Second

// Server is one redis-server process started by [Start]. Its methods are
// safe for concurrent use.
type Server struct {
	// Addr is the server's address, "127.0.0.1:port".
	Addr string

	cmd  *exec.Cmd
	out  *syncBuffer
	once sync.Once
	done chan struct{} // closed when the process has been waited for
	err  error         // the process's exit status; valid once done is closed
}

// Start runs a redis-server for t and returns it once it answers PING. The
// server is stopped (SIGTERM, then SIGKILL) by pid in t.Cleanup. When
// redis-server is not on PATH, Start skips t, or fails it if
// LOCKWATCH_REQUIRE_REDIS=1.
func Start(t testing.TB) *Server {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("redis-server not found on PATH (%v) and %s=1", err, RequireEnv)
		}
		t.Skipf("redis-server not found on PATH (%v); set %s=1 to fail instead", err, RequireEnv)
	}
	var lastErr error
	// A free port found by listening may be taken again before the server
	// binds it: try a few times.
	for attempt := 0; attempt < 5; attempt++ {
		s, err := start(t, path)
		if err == nil {
			return s
		}
		lastErr = err
	}
	t.Fatalf("start redis-server: %v", lastErr)
	return nil
}

func start(t testing.TB, path string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s := &Server{Addr: addr, out: &syncBuffer{}, done: make(chan struct{})}
	s.cmd = exec.Command(path,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", t.TempDir(),
		"--daemonize", "no",
		"--loglevel", "warning",
	)
	s.cmd.Stdout = s.out
	s.cmd.Stderr = s.out
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("run %s: %w", path, err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	if err := s.waitReady(); err != nil {
		s.stop()
		return nil, fmt.Errorf("%w; server output:\n%s", err, s.out.String())
	}
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("stop redis-server pid %d: %v; output:\n%s", s.cmd.Process.Pid, err, s.out.String())
		}
	})
	return s, nil
}

// Pid returns the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Output returns what the server has logged so far.
func (s *Server) Output() string { return s.out.String() }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady polls PING until the server answers PONG, the process exits, or
// StartTimeout passes.
func (s *Server) waitReady() error {
	deadline := time.Now().Add(StartTimeout)
	for {
		err := Ping(s.Addr)
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("redis-server on %s exited before answering PING: %v", s.Addr, s.err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s did not answer PING within %v: %v", s.Addr, StartTimeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Ping sends one inline PING to addr on a fresh connection and reports
// whether the answer was +PONG.
func Ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return err
	}
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q, want %q", line, "+PONG\r\n")
	}
	return nil
}

// stop terminates the server by pid and waits for it. It is idempotent.
func (s *Server) stop() error {
	var err error
	s.once.Do(func() {
		select {
		case <-s.done:
			return // already exited
		default:
		}
		if e := s.cmd.Process.Signal(syscall.SIGTERM); e != nil && !errors.Is(e, os.ErrProcessDone) {
			err = e
		}
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
			err = errors.New("did not exit within 5s of SIGTERM; killed")
		}
	})
	return err
}

// syncBuffer is a bytes.Buffer safe for the writer goroutines of exec.Cmd
// and readers in the test.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
