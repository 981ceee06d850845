// Package calllog is the chaos provider's own log of every call it handles,
// one JSON object a line, appended before the answer leaves the process (a
// kill -9 loses no answered call), and read back by the suite.
package calllog

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"
)

// What a record is.
const (
	Delivery = "delivery" // a task delivery the provider answered (Answer: 200 outcome, 200 error, 202, 503, ...)
	Work     = "work"     // one run of Work: the SDK runs it once per webhook-id
	Callback = "callback" // an asynchronous result posted back (Answer: converge's status, or dropped)
)

// Record is one line.
type Record struct {
	Type       string    `json:"type"`
	At         time.Time `json:"at"`
	Boot       int       `json:"boot"` // which start of the provider process (0, 1, ...)
	WebhookID  string    `json:"webhook_id,omitempty"`
	TaskID     string    `json:"task_id"`
	ClaimEpoch int64     `json:"claim_epoch"`
	Resource   string    `json:"resource,omitempty"` // the resource's id
	Generation int64     `json:"generation,omitempty"`
	Reaction   string    `json:"reaction,omitempty"`
	Success    bool      `json:"success"` // a Work run or an answer that carried an outcome
	Answer     string    `json:"answer,omitempty"`
	Fault      string    `json:"fault,omitempty"` // the fault injected into this call, if any
}

// Writer appends records to a file.
type Writer struct {
	mu sync.Mutex
	f  *os.File
}

// Open opens path for appending, creating it.
func Open(path string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	return &Writer{f: f}, nil
}

// Write stamps r with the time and appends it in one write(2), so a killed
// process leaves whole lines.
func (w *Writer) Write(r Record) error {
	r.At = time.Now()
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	_, err = w.f.Write(append(b, '\n'))
	return err
}

// Close closes the file.
func (w *Writer) Close() error { return w.f.Close() }

// Read reads every record of path. A torn last line (none is expected: each
// record is one write) is an error.
func Read(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, r)
	}
	return out, sc.Err()
}
