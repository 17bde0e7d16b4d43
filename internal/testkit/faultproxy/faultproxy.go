// Package faultproxy is an in-process TCP proxy that injects network faults
// between a client and a server, for tests.
//
// [New] listens on a free loopback port and forwards every connection it
// accepts to the target address. While it runs, a test can
//
//   - delay each direction ([Proxy.SetLatency]): every chunk read is written
//     on no earlier than the latency after it was read, in order;
//   - blackhole the network for a while ([Proxy.Blackhole]): connections
//     are still accepted and kept open, but nothing is forwarded in either
//     direction, and what is read meanwhile is discarded (a partition whose
//     packets are lost; clients see silence, not errors);
//   - reset every current connection ([Proxy.Reset]): both sides are closed
//     with an RST (SO_LINGER 0), as a middlebox or a peer crash would.
//
// The package is internal: only lockwatch's own tests use it.
package faultproxy

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Direction names one way of the traffic through a [Proxy].
type Direction uint8

const (
	// Upstream is the traffic from the client to the target.
	Upstream Direction = iota
	// Downstream is the traffic from the target back to the client.
	Downstream
)

// String returns the direction's name.
func (d Direction) String() string {
	switch d {
	case Upstream:
		return "upstream"
	case Downstream:
		return "downstream"
	}
	return fmt.Sprintf("Direction(%d)", uint8(d))
}

// DialTimeout bounds how long the proxy waits to connect to its target for
// one accepted connection.
const DialTimeout = 2 * time.Second

// Stats counts what a [Proxy] did.
type Stats struct {
	// Accepted counts client connections accepted.
	Accepted int64
	// Reset counts connections closed by [Proxy.Reset].
	Reset int64
	// Forwarded counts bytes written on, both directions together.
	Forwarded int64
	// Dropped counts bytes discarded by a blackhole, both directions together.
	Dropped int64
}

// Proxy forwards TCP connections from its listener to a target and injects
// faults on command. Its methods are safe for concurrent use. The zero value
// is not usable: call [New].
type Proxy struct {
	target string
	ln     net.Listener

	latency [2]atomic.Int64 // per Direction, nanoseconds
	holeEnd atomic.Int64    // unix nanoseconds until which nothing is forwarded

	mu     sync.Mutex         // guards conns and closed
	conns  map[*pair]struct{} // live connection pairs
	closed bool

	wg    sync.WaitGroup  // the accept loop and every pair's goroutines
	stats [4]atomic.Int64 // the Stats fields, indexed by the stat constants
}

const (
	statAccepted = iota
	statReset
	statForwarded
	statDropped
)

// pair is one client connection and its connection to the target.
type pair struct {
	client, server *net.TCPConn
	once           sync.Once
	done           chan struct{} // closed when the pair is closed
}

// New starts a proxy listening on 127.0.0.1 on a free port and forwarding to
// target. Close stops it.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{target: target, ln: ln, conns: make(map[*pair]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the address clients connect to, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// SetLatency delays every chunk sent in direction dir by d from now on
// (chunks already read keep the delay they were read with). 0 removes the
// delay; a negative d counts as 0.
func (p *Proxy) SetLatency(dir Direction, d time.Duration) {
	p.latency[dir].Store(int64(max(d, 0)))
}

// Blackhole stops forwarding in both directions for d from now: what is
// read meanwhile, and what was read earlier but is due to be written during
// it, is discarded. Connections stay open and new ones are accepted.
// Blackhole(0) ends a blackhole now.
func (p *Proxy) Blackhole(d time.Duration) {
	p.holeEnd.Store(time.Now().Add(max(d, 0)).UnixNano())
}

// Blackholed reports whether a blackhole is in effect now.
func (p *Proxy) Blackholed() bool { return p.blackholed(time.Now()) }

func (p *Proxy) blackholed(now time.Time) bool {
	return now.UnixNano() < p.holeEnd.Load()
}

// Reset closes every current connection on both sides with an RST and
// returns how many connection pairs it reset. Later connections are
// forwarded as usual.
func (p *Proxy) Reset() int {
	p.mu.Lock()
	pairs := make([]*pair, 0, len(p.conns))
	for c := range p.conns {
		pairs = append(pairs, c)
	}
	p.mu.Unlock()
	for _, c := range pairs {
		c.abort()
	}
	p.stats[statReset].Add(int64(len(pairs)))
	return len(pairs)
}

// Conns returns the number of connection pairs open now.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	return Stats{
		Accepted:  p.stats[statAccepted].Load(),
		Reset:     p.stats[statReset].Load(),
		Forwarded: p.stats[statForwarded].Load(),
		Dropped:   p.stats[statDropped].Load(),
	}
}

// Close stops accepting, closes every connection and returns when none of
// the proxy's goroutines is left. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	already := p.closed
	p.closed = true
	pairs := make([]*pair, 0, len(p.conns))
	for c := range p.conns {
		pairs = append(pairs, c)
	}
	p.mu.Unlock()
	var err error
	if !already {
		err = p.ln.Close()
	}
	for _, c := range pairs {
		c.close()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.stats[statAccepted].Add(1)
		p.wg.Add(1)
		go p.serve(c.(*net.TCPConn))
	}
}

// serve connects an accepted client to the target and forwards both ways
// until either side ends.
func (p *Proxy) serve(client *net.TCPConn) {
	defer p.wg.Done()
	s, err := net.DialTimeout("tcp", p.target, DialTimeout)
	if err != nil {
		// The target is down: the client sees its connection reset, as it
		// would connecting to the target directly.
		_ = client.SetLinger(0)
		_ = client.Close()
		return
	}
	c := &pair{client: client, server: s.(*net.TCPConn), done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.close()
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()

	var ends sync.WaitGroup
	ends.Add(2)
	go func() { defer ends.Done(); p.forward(c, Upstream, c.client, c.server) }()
	go func() { defer ends.Done(); p.forward(c, Downstream, c.server, c.client) }()
	ends.Wait()
	c.close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// chunk is one read, due to be written at due.
type chunk struct {
	b   []byte
	due time.Time
}

// forward copies src to dst, one direction of c: a reader stamps each chunk
// with its due time and a writer writes it then, unless a blackhole is in
// effect at that moment. When either end fails, the whole pair is closed.
func (p *Proxy) forward(c *pair, dir Direction, src, dst *net.TCPConn) {
	queue := make(chan chunk, 1024)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		timer := time.NewTimer(time.Hour)
		timer.Stop()
		defer timer.Stop()
		for ch := range queue {
			if wait := time.Until(ch.due); wait > 0 {
				timer.Reset(wait)
				select {
				case <-timer.C:
				case <-c.done:
					for range queue {
					}
					return
				}
			}
			if p.blackholed(time.Now()) {
				p.stats[statDropped].Add(int64(len(ch.b)))
				continue
			}
			if _, err := dst.Write(ch.b); err != nil {
				c.close()
				// Drain so that the reader never blocks on a full queue.
				for range queue {
				}
				return
			}
			p.stats[statForwarded].Add(int64(len(ch.b)))
		}
		// src ended: pass the end on, as a half close.
		_ = dst.CloseWrite()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			now := time.Now()
			if p.blackholed(now) {
				p.stats[statDropped].Add(int64(n))
			} else {
				b := make([]byte, n)
				copy(b, buf[:n])
				queue <- chunk{b: b, due: now.Add(time.Duration(p.latency[dir].Load()))}
			}
		}
		if err != nil {
			// EOF, a reset or a close: the writer finishes what is queued,
			// then half-closes dst.
			break
		}
	}
	close(queue)
	<-writerDone
}

// abort closes both connections with an RST.
func (c *pair) abort() {
	c.once.Do(func() {
		close(c.done)
		_ = c.client.SetLinger(0)
		_ = c.server.SetLinger(0)
		_ = c.client.Close()
		_ = c.server.Close()
	})
}

// close closes both connections normally.
func (c *pair) close() {
	c.once.Do(func() {
		close(c.done)
		_ = c.client.Close()
		_ = c.server.Close()
	})
}
