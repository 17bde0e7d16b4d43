// Package memconn gives go-redis clients an in-memory connection to a
// miniredis server that works inside a testing/synctest bubble.
//
// miniredis's Dial serves a net.Pipe, which has no buffer: a pipeline longer
// than the server's read buffer deadlocks (the server blocks writing the
// first reply while the client blocks writing the rest of the pipeline). A
// TCP socket's buffers hide this. The connections made here queue the
// client's writes and hand them to the pipe from a goroutine, as a socket
// would.
package memconn

import (
	"context"
	"errors"
	"net"
	"sync"

	"github.com/alicebob/miniredis/v2"
)

// Addr is the address to give go-redis clients that use [Dialer]. It is
// never dialled, but go-redis releases from v9.1x resolve the host name of
// Options.Addr ("localhost" by default) when they connect, and a name lookup
// inside a testing/synctest bubble crashes it: an IP literal needs none.
const Addr = "127.0.0.1:6379"

// Dialer returns a go-redis Options.Dialer that connects to m in memory.
func Dialer(m *miniredis.Miniredis) func(context.Context, string, string) (net.Conn, error) {
	return func(context.Context, string, string) (net.Conn, error) {
		c, err := m.Dial()
		if err != nil {
			return nil, err
		}
		return New(c), nil
	}
}

// New wraps c so that writes never block: they are queued and written to c
// by a goroutine that ends when the connection is closed.
func New(c net.Conn) net.Conn {
	q := &queued{Conn: c, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go q.pump()
	return q
}

var errClosed = errors.New("memconn: connection closed")

type queued struct {
	net.Conn
	mu     sync.Mutex // guards buf, err
	buf    []byte
	err    error
	wake   chan struct{}
	done   chan struct{}
	closer sync.Once
}

func (q *queued) Write(p []byte) (int, error) {
	q.mu.Lock()
	if q.err != nil {
		err := q.err
		q.mu.Unlock()
		return 0, err
	}
	q.buf = append(q.buf, p...)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (q *queued) pump() {
	for {
		select {
		case <-q.done:
			return
		case <-q.wake:
		}
		q.mu.Lock()
		b := q.buf
		q.buf = nil
		q.mu.Unlock()
		if len(b) == 0 {
			continue
		}
		if _, err := q.Conn.Write(b); err != nil {
			q.mu.Lock()
			q.err = err
			q.mu.Unlock()
			return
		}
	}
}

func (q *queued) Close() error {
	q.closer.Do(func() {
		q.mu.Lock()
		q.err = errClosed
		q.mu.Unlock()
		close(q.done)
	})
	return q.Conn.Close()
}
