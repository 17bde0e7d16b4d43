// Package testredis starts a real redis-server for tests.
//
// [Start] finds redis-server on PATH, runs it on a free loopback port with
// persistence off, waits until it answers PING, and stops it by pid when the
// test ends. [StartWith] takes options: an append-only file, a data
// directory, a port. [Server.Stop], [Server.Kill] and [Server.Restart] stop
// and start the server again on the same port and directory, for restart
// scenarios; [Server.Pause] and [Server.Resume] stall and continue it
// (SIGSTOP, SIGCONT). [StartCluster] runs a Redis Cluster of such servers,
// [StartSentinel] a master, a replica and sentinels. Without redis-server the test is skipped, unless the
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
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// RequireEnv names the environment variable that turns a missing
// redis-server from a skip into a failure when set to "1".
const RequireEnv = "LOCKWATCH_REQUIRE_REDIS"

// StartTimeout bounds how long [Start] waits for a started server to answer PING.
const StartTimeout = 10 * time.Second

// Server is one redis-server started by [Start] or [StartWith], on one
// port and one data directory for its whole life: [Server.Restart] runs a
// new process on both. Its methods are safe for concurrent use.
type Server struct {
	// Addr is the server's address, "127.0.0.1:port".
	Addr string
	// Dir is the server's working directory, where an append-only file lives.
	Dir string

	path string   // redis-server binary
	args []string // its command line, the same for every restart
	out  *syncBuffer

	mu   sync.Mutex // guards proc
	proc *process   // the current process; a stopped one until restarted

	paused   atomic.Bool  // between Pause and Resume
	killTook atomic.Int64 // ns from the last Kill's SIGKILL to the exit seen
}

// process is one run of redis-server.
type process struct {
	cmd  *exec.Cmd
	once sync.Once
	done chan struct{} // closed when the process has been waited for
	err  error         // the process's exit status; valid once done is closed
}

// Options configures [StartWith]. The zero value is what [Start] uses.
type Options struct {
	// AppendOnly turns on the append-only file with appendfsync always, so
	// that every write survives a restart, even after SIGKILL. The default
	// is no persistence at all: a restart loses every key.
	AppendOnly bool
	// Dir is the server's working directory. The default is a new
	// t.TempDir().
	Dir string
	// Port is the port to listen on, on 127.0.0.1. The default is a free
	// port.
	Port int
	// Config, when not empty, is written to a file in Dir (ConfigName, or
	// "redis.conf") that is passed as the first argument, before the
	// command line options (which win over it). A sentinel needs one: it
	// rewrites it.
	Config string
	// ConfigName names the file Config is written to.
	ConfigName string
	// Args are extra command line arguments, appended after the usual ones
	// (for example "--cluster-enabled", "yes" or "--sentinel").
	Args []string
}

// Start runs a redis-server for t, without persistence, and returns it once
// it answers PING. The server is stopped (SIGTERM, then SIGKILL) by pid in
// t.Cleanup. When redis-server is not on PATH, Start skips t, or fails it if
// LOCKWATCH_REQUIRE_REDIS=1.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is [Start] with options.
func StartWith(t testing.TB, o Options) *Server {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("redis-server not found on PATH (%v) and %s=1", err, RequireEnv)
		}
		t.Skipf("redis-server not found on PATH (%v); set %s=1 to fail instead", err, RequireEnv)
	}
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	var lastErr error
	// A free port found by listening may be taken again before the server
	// binds it: try a few times.
	for attempt := 0; attempt < 5; attempt++ {
		s, err := start(t, path, o)
		if err == nil {
			return s
		}
		lastErr = err
		if o.Port != 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Fatalf("start redis-server: %v", lastErr)
	return nil
}

func start(t testing.TB, path string, o Options) (*Server, error) {
	port := o.Port
	if port == 0 {
		var err error
		if port, err = reservePort(t); err != nil {
			return nil, err
		}
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	appendonly := "no"
	if o.AppendOnly {
		appendonly = "yes"
	}
	s := &Server{Addr: addr, Dir: o.Dir, path: path, out: &syncBuffer{}}
	if o.Config != "" {
		name := o.ConfigName
		if name == "" {
			name = "redis.conf"
		}
		file := filepath.Join(o.Dir, name)
		if err := os.WriteFile(file, []byte(o.Config), 0o600); err != nil {
			return nil, fmt.Errorf("write %s: %w", file, err)
		}
		s.args = append(s.args, file)
	}
	s.args = append(s.args,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", appendonly,
		"--appendfsync", "always",
		"--dir", o.Dir,
		"--daemonize", "no",
		"--loglevel", "warning",
	)
	s.args = append(s.args, o.Args...)
	if err := s.run(); err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		p := s.current()
		switch err := p.stop(); {
		case errors.Is(err, errSlowExit):
			// On a loaded machine a server may take longer to exit; it
			// was killed, and nothing the test judged depends on it.
			t.Logf("stop redis-server pid %d: %v", p.cmd.Process.Pid, err)
		case err != nil:
			t.Errorf("stop redis-server pid %d: %v; output:\n%s", p.cmd.Process.Pid, err, s.out.String())
		}
	})
	return s, nil
}

// run starts a new process with s's command line and waits until it
// answers PING. Called with s.mu held, or before s is shared.
func (s *Server) run() error {
	p := &process{cmd: exec.Command(s.path, s.args...), done: make(chan struct{})}
	p.cmd.Stdout = s.out
	p.cmd.Stderr = s.out
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("run %s: %w", s.path, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	s.proc = p
	if err := s.waitReady(p); err != nil {
		_ = p.stop()
		return fmt.Errorf("%w; server output:\n%s", err, s.out.String())
	}
	return nil
}

func (s *Server) current() *process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}

// Stop stops the server (SIGTERM, then SIGKILL after 10s) and waits for it
// to exit. Without persistence, every key is lost. It does nothing if the
// server is not running.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	p := s.current()
	if err := p.stop(); err != nil && !errors.Is(err, errSlowExit) {
		t.Fatalf("stop redis-server pid %d: %v; output:\n%s", p.cmd.Process.Pid, err, s.out.String())
	}
}

// Kill kills the server with SIGKILL, as a crash would, and waits for it to
// exit. It does nothing if the server is not running.
//
// Until the process exits its port and connections stay open: the kernel
// takes new connections into its backlog and nothing answers, as from a
// stalled server. That takes a few milliseconds, but on a loaded machine
// it took from 0.3 s up to 6.7 s (CI beside two CPU burners): see
// [Server.KillTook].
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	p := s.current()
	start := time.Now()
	if err := p.kill(); err != nil {
		t.Fatalf("kill redis-server pid %d: %v", p.cmd.Process.Pid, err)
	}
	took := time.Since(start)
	s.killTook.Store(int64(took))
	if took > 50*time.Millisecond {
		t.Logf("redis-server %s (pid %d) took %v to exit after its SIGKILL", s.Addr, p.cmd.Process.Pid, took.Round(time.Millisecond))
	}
}

// KillTook returns how long the process killed by the last [Server.Kill]
// took to exit: until then the server was silent, not refusing
// connections. 0 before any Kill.
func (s *Server) KillTook() time.Duration { return time.Duration(s.killTook.Load()) }

// Pause stops the server's process with SIGSTOP, as a stalled host or a
// long pause would: it keeps its connections and its port but answers
// nothing, and its keys do not expire meanwhile (they are expired when it
// resumes if their time has passed). [Server.Resume] continues it; the
// cleanup, Stop and Restart continue it too.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	p := s.current()
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP redis-server pid %d: %v", p.cmd.Process.Pid, err)
	}
	s.paused.Store(true)
}

// Paused reports whether the server was stopped by [Server.Pause] and not
// resumed since.
func (s *Server) Paused() bool { return s.paused.Load() }

// Resume continues a server stopped by [Server.Pause] (SIGCONT). It does
// nothing to a server that runs.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	p := s.current()
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("SIGCONT redis-server pid %d: %v", p.cmd.Process.Pid, err)
	}
	s.paused.Store(false)
}

// Restart stops the server if it runs (as [Server.Stop]), then starts a new
// process on the same port and data directory and returns once it answers
// PING. Only keys in the append-only file ([Options.AppendOnly]) survive,
// and the script cache starts empty.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.paused.Store(false)
	if err := s.proc.stop(); err != nil {
		t.Fatalf("stop redis-server pid %d: %v; output:\n%s", s.proc.cmd.Process.Pid, err, s.out.String())
	}
	var lastErr error
	// The port was just freed: nothing else should take it, but a slow
	// release is retried.
	for attempt := 0; attempt < 5; attempt++ {
		if lastErr = s.run(); lastErr == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("restart redis-server on %s: %v", s.Addr, lastErr)
}

// Running reports whether the server's process has not exited.
func (s *Server) Running() bool {
	select {
	case <-s.current().done:
		return false
	default:
		return true
	}
}

// Pid returns the process id of the server's current process.
func (s *Server) Pid() int { return s.current().cmd.Process.Pid }

// Output returns what the server has logged so far.
func (s *Server) Output() string { return s.out.String() }

// waitReady polls PING until the server answers PONG, the process p exits,
// or StartTimeout passes.
func (s *Server) waitReady(p *process) error {
	deadline := time.Now().Add(StartTimeout)
	for {
		err := Ping(s.Addr)
		if err == nil {
			// The port may have been taken, between reservePort and the bind,
			// by a server of another test binary (packages run in
			// parallel): only our own process will do.
			pid, perr := InfoField(s.Addr, "server", "process_id")
			if perr == nil && pid == strconv.Itoa(p.cmd.Process.Pid) {
				return nil
			}
			if perr == nil {
				err = fmt.Errorf("%s is served by another process (pid %s, want %d)", s.Addr, pid, p.cmd.Process.Pid)
			} else {
				err = perr
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("redis-server on %s exited before answering PING: %v", s.Addr, p.err)
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

// stop terminates the process by pid and waits for it. It is idempotent.
// errSlowExit: a server did not exit within 10 s of SIGTERM, and was
// killed.
var errSlowExit = errors.New("did not exit within 10s of SIGTERM; killed")

func (p *process) stop() error {
	var err error
	p.once.Do(func() {
		select {
		case <-p.done:
			return // already exited
		default:
		}
		if e := p.cmd.Process.Signal(syscall.SIGTERM); e != nil && !errors.Is(e, os.ErrProcessDone) {
			err = e
		}
		// A paused process (see Server.Pause) handles SIGTERM only once
		// it is continued.
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
			err = errSlowExit
		}
	})
	return err
}

// kill kills the process by pid and waits for it. It is idempotent, and
// does nothing after stop.
func (p *process) kill() error {
	var err error
	p.once.Do(func() {
		if e := p.cmd.Process.Kill(); e != nil && !errors.Is(e, os.ErrProcessDone) {
			err = e
		}
		<-p.done
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
