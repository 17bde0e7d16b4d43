package chaos_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"
)

// The journal: what one worker process saw, one JSON object a line, each
// line written with its own write(2) as soon as it happened, so that what
// a process wrote survives it being stopped or killed. Times are the wall
// clock in nanoseconds since the Unix epoch: every process runs on this
// machine, so their clocks are the same clock.

// Kinds of journal records.
const (
	recStart   = "start"   // a job obtained its key and starts working
	recEnd     = "end"     // a job stopped working (and then released)
	recLost    = "lost"    // OnLost was called
	recLag     = "lag"     // the process was measurably not scheduled
	recSummary = "summary" // the worker's totals, written once at the end
	// recFault is a fault the parent injected, in the parent's faults
	// file: Fault names its kind, Target what it hit, From and At when it
	// began and ended, Proc the worker it hit (-1: none).
	recFault = "fault"
)

// record is one line of a journal. Which fields are set depends on Kind.
type record struct {
	Kind  string `json:"k"`
	Proc  int    `json:"p"`
	Owner string `json:"o,omitempty"` // a job: "p<proc>.g<goroutine>.s<seq>"
	Key   string `json:"key,omitempty"`
	Lib   string `json:"lib,omitempty"`   // start: "redislock" or "redsync"
	Value string `json:"value,omitempty"` // start, lost: the value stored under the key
	TTL   int64  `json:"ttl,omitempty"`   // start: ns
	Plan  int64  `json:"plan,omitempty"`  // start: how long the job means to work, ns
	At    int64  `json:"at"`              // start, end, lost; lag: when it was measured

	// end: when the job's context was cancelled before the work was done
	// (0: it was not), context.Cause's text and class (see causeClass).
	CancelAt   int64  `json:"cancel_at,omitempty"`
	Cause      string `json:"cause,omitempty"` // end: the cause; lost: OnLost's error
	CauseClass string `json:"class,omitempty"`
	Release    string `json:"release,omitempty"` // end: the release's error, "" when it succeeded
	// end: "not-held" when the release found the lock expired or another
	// owner's, "error" when it failed otherwise, "" when it succeeded.
	ReleaseClass string `json:"release_class,omitempty"`

	// lag: the process was woken Late too late somewhere in [From, At].
	From int64 `json:"from,omitempty"`
	Late int64 `json:"late,omitempty"`

	// summary
	Jobs        int            `json:"jobs,omitempty"`
	NotObtained int            `json:"not_obtained,omitempty"`
	ObtainErrs  int            `json:"obtain_errs,omitempty"`
	ErrKinds    map[string]int `json:"err_kinds,omitempty"` // obtain errors by text (the first 20 texts)
	Renewals    int64          `json:"renewals,omitempty"`
	// summary: the worker's watchdog's Stats: holders told a lock may be
	// lost, of them told after the lock's E - d, and renewals not
	// confirmed by their deadline.
	Unconfirmed int64 `json:"unconfirmed,omitempty"`
	ToldLate    int64 `json:"told_late,omitempty"`
	Missed      int64 `json:"missed,omitempty"`
	// summary: dials that did not go through the worker's fault proxies
	// (an address no proxy stands for): a partition would not cut them.
	DirectDials int `json:"direct_dials,omitempty"`
	// summary: jobs of the contender (worker.contend), among Jobs.
	Contended int `json:"contended,omitempty"`

	// fault
	Fault  string `json:"fault,omitempty"`
	Target string `json:"target,omitempty"`
	Note   string `json:"note,omitempty"`
}

// journal appends records to a file. Its methods are safe for concurrent
// use.
type journal struct {
	mu   sync.Mutex // guards f and err
	f    *os.File
	proc int
	err  error // the first write error
}

func createJournal(path string, proc int) (*journal, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	return &journal{f: f, proc: proc}, nil
}

// write appends r, stamped with the journal's process.
func (j *journal) write(r record) { j.writeAs(j.proc, r) }

// writeAs appends r, stamped with process proc.
func (j *journal) writeAs(proc int, r record) {
	r.Proc = proc
	b, err := json.Marshal(r)
	if err != nil {
		panic(err) // a record always marshals
	}
	b = append(b, '\n')
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, err := j.f.Write(b); err != nil && j.err == nil {
		j.err = err
	}
}

// close closes the file and returns the first error of any write.
func (j *journal) close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.f.Close(); err != nil && j.err == nil {
		j.err = err
	}
	return j.err
}

// readJournal reads every record of the journal at path. A last line cut
// short (a process killed in the middle of a write) is reported as an
// error like any other malformed line.
func readJournal(path string) ([]record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return out, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

func nanos(t time.Time) int64 { return t.UnixNano() }

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// writeFaults writes the faults the parent injected to path, one record a
// line, so that a run's journals can be checked again with its faults.
func writeFaults(path string, faults []fault) error {
	j, err := createJournal(path, -1)
	if err != nil {
		return err
	}
	for _, f := range faults {
		j.writeAs(f.proc, record{Kind: recFault, Fault: f.kind, Target: f.target, Note: f.note, From: nanos(f.from), At: nanos(f.to)})
	}
	return j.close()
}

// faultOf returns the fault a recFault record tells.
func faultOf(r record) fault {
	return fault{kind: r.Fault, target: r.Target, note: r.Note, proc: r.Proc, from: fromNanos(r.From), to: fromNanos(r.At)}
}
