package testredis

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// SentinelOptions configures [StartSentinel].
type SentinelOptions struct {
	// Sentinels is the number of sentinels, 1 or more; the default is 1.
	// The quorum is a majority of them.
	Sentinels int
	// DownAfter is down-after-milliseconds: how long the master may not
	// answer before a sentinel sees it down. The default is 500 ms.
	DownAfter time.Duration
	// FailoverTimeout is failover-timeout. The default is 2 s.
	FailoverTimeout time.Duration
	// ReplicaLink, when not nil, is given the master's address and returns
	// the address the replica replicates from: a proxy in front of the
	// master, say, so that a test can cut the replication link alone. The
	// default is the master's address.
	ReplicaLink func(master string) string
}

// SentinelName is the name the sentinels monitor the master under, for
// redis.FailoverOptions.MasterName.
const SentinelName = "lockwatch"

// Sentinel is a master, one replica and sentinels that monitor them, each
// a [Server] of its own (a sentinel is redis-server with a sentinel.conf
// and --sentinel). Every process is stopped by pid at cleanup.
type Sentinel struct {
	// Name is the monitored master's name, [SentinelName].
	Name      string
	Master    *Server
	Replica   *Server
	Sentinels []*Server
}

// SentinelStartTimeout bounds how long [StartSentinel] waits until the
// replica is in sync and every sentinel knows the replica and the others.
const SentinelStartTimeout = 30 * time.Second

// StartSentinel starts a master, a replica of it, and the sentinels, and
// returns once the replica's link is up and every sentinel sees the master,
// the replica (not down) and every other sentinel, so that a failover can
// start at once. It skips t as [Start] does.
func StartSentinel(t testing.TB, o SentinelOptions) *Sentinel {
	t.Helper()
	if o.Sentinels == 0 {
		o.Sentinels = 1
	}
	if o.DownAfter == 0 {
		o.DownAfter = 500 * time.Millisecond
	}
	if o.FailoverTimeout == 0 {
		o.FailoverTimeout = 2 * time.Second
	}
	s := &Sentinel{Name: SentinelName}
	// A diskless full sync waits 5 s by default for more replicas to join.
	s.Master = StartWith(t, Options{Args: []string{"--repl-diskless-sync-delay", "0"}})
	link := s.Master.Addr
	if o.ReplicaLink != nil {
		link = o.ReplicaLink(s.Master.Addr)
	}
	host, port, _ := net.SplitHostPort(link)
	s.Replica = StartWith(t, Options{Args: []string{"--replicaof", host, port}})
	deadline := time.Now().Add(SentinelStartTimeout)
	waitUntil(t, deadline, "replica "+s.Replica.Addr+" in sync with "+link, func() error {
		st, err := InfoField(s.Replica.Addr, "replication", "master_link_status")
		if err == nil && st != "up" {
			err = fmt.Errorf("master_link_status:%s", st)
		}
		return err
	})
	mhost, mport, _ := net.SplitHostPort(s.Master.Addr)
	quorum := o.Sentinels/2 + 1
	conf := fmt.Sprintf("sentinel monitor %s %s %s %d\n"+
		"sentinel down-after-milliseconds %[1]s %[5]d\n"+
		"sentinel failover-timeout %[1]s %[6]d\n"+
		"sentinel parallel-syncs %[1]s 1\n",
		s.Name, mhost, mport, quorum, o.DownAfter.Milliseconds(), o.FailoverTimeout.Milliseconds())
	for range o.Sentinels {
		sn := StartWith(t, Options{Config: conf, ConfigName: "sentinel.conf", Args: []string{"--sentinel"}})
		s.Sentinels = append(s.Sentinels, sn)
	}
	for _, sn := range s.Sentinels {
		waitUntil(t, deadline, "sentinel "+sn.Addr+" sees the replica and the other sentinels", func() error {
			return s.ready(sn.Addr, o.Sentinels-1)
		})
	}
	return s
}

// ready checks that the sentinel at addr sees the master up, the replica
// up, and others other sentinels.
func (s *Sentinel) ready(addr string, others int) error {
	r, err := Do(addr, "SENTINEL", "MASTER", s.Name)
	if err != nil {
		return err
	}
	m := pairs(r)
	if m["flags"] != "master" {
		return fmt.Errorf("master flags %q", m["flags"])
	}
	if n, _ := strconv.Atoi(m["num-other-sentinels"]); n != others {
		return fmt.Errorf("num-other-sentinels %s, want %d", m["num-other-sentinels"], others)
	}
	r, err = Do(addr, "SENTINEL", "REPLICAS", s.Name)
	if err != nil {
		return err
	}
	list, _ := r.([]any)
	for _, e := range list {
		rep := pairs(e)
		if net.JoinHostPort(rep["ip"], rep["port"]) == s.Replica.Addr && rep["flags"] == "slave" && rep["master-link-status"] == "ok" {
			return nil
		}
	}
	return fmt.Errorf("replica %s not seen up: %v", s.Replica.Addr, r)
}

// pairs turns a flat field/value array reply into a map.
func pairs(r any) map[string]string {
	out := map[string]string{}
	list, _ := r.([]any)
	for i := 0; i+1 < len(list); i += 2 {
		k, _ := list[i].(string)
		v, _ := list[i+1].(string)
		out[k] = v
	}
	return out
}

// Addrs returns the sentinels' addresses, for
// redis.FailoverOptions.SentinelAddrs.
func (s *Sentinel) Addrs() []string {
	out := make([]string, len(s.Sentinels))
	for i, sn := range s.Sentinels {
		out[i] = sn.Addr
	}
	return out
}

// MasterAddr returns the master's address as the first answering sentinel
// reports it (SENTINEL GET-MASTER-ADDR-BY-NAME).
func (s *Sentinel) MasterAddr(t testing.TB) string {
	t.Helper()
	addr, err := s.masterAddr()
	if err != nil {
		t.Fatalf("SENTINEL GET-MASTER-ADDR-BY-NAME %s: %v", s.Name, err)
	}
	return addr
}

func (s *Sentinel) masterAddr() (string, error) {
	var last error
	for _, sn := range s.Sentinels {
		r, err := Do(sn.Addr, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.Name)
		if err != nil {
			last = err
			continue
		}
		l, _ := r.([]any)
		if len(l) != 2 {
			last = fmt.Errorf("reply %v", r)
			continue
		}
		h, _ := l[0].(string)
		p, _ := l[1].(string)
		return net.JoinHostPort(h, p), nil
	}
	return "", last
}

// Failover asks the first sentinel for a failover now (SENTINEL FAILOVER),
// without waiting for the master to be seen down.
func (s *Sentinel) Failover(t testing.TB) {
	t.Helper()
	if r, err := Do(s.Sentinels[0].Addr, "SENTINEL", "FAILOVER", s.Name); err != nil || r != "OK" {
		t.Fatalf("SENTINEL FAILOVER %s: reply %v, error %v", s.Name, r, err)
	}
}

// WaitFailover waits until every sentinel names a master other than old
// and that server reports role:master; it returns its address. It fails t
// after within.
func (s *Sentinel) WaitFailover(t testing.TB, old string, within time.Duration) string {
	t.Helper()
	var addr string
	waitUntil(t, time.Now().Add(within), "a failover away from "+old, func() error {
		addr = ""
		for _, sn := range s.Sentinels {
			if !sn.Running() {
				continue
			}
			r, err := Do(sn.Addr, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.Name)
			if err != nil {
				return err
			}
			l, _ := r.([]any)
			if len(l) != 2 {
				return fmt.Errorf("sentinel %s: reply %v", sn.Addr, r)
			}
			h, _ := l[0].(string)
			p, _ := l[1].(string)
			a := net.JoinHostPort(h, p)
			if a == old {
				return fmt.Errorf("sentinel %s still names %s", sn.Addr, old)
			}
			if addr != "" && a != addr {
				return fmt.Errorf("sentinels name %s and %s", addr, a)
			}
			addr = a
		}
		role, err := InfoField(addr, "replication", "role")
		if err == nil && role != "master" {
			err = fmt.Errorf("%s reports role:%s", addr, role)
		}
		return err
	})
	return addr
}

// Server returns the master or the replica at addr, or nil.
func (s *Sentinel) Server(addr string) *Server {
	for _, sv := range []*Server{s.Master, s.Replica} {
		if sv.Addr == addr {
			return sv
		}
	}
	return nil
}

// Output returns the sentinels' logs, for failure messages.
func (s *Sentinel) Output() string {
	var b strings.Builder
	for _, sn := range s.Sentinels {
		fmt.Fprintf(&b, "--- sentinel %s\n%s", sn.Addr, sn.Output())
	}
	return b.String()
}

// waitUntil polls check every 20 ms until it returns nil, failing t with
// what and check's last error after deadline.
func waitUntil(t testing.TB, deadline time.Time, what string, check func() error) {
	t.Helper()
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
