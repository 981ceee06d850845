package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5" //nolint:gosec // an S3 ETag is an MD5 by definition, not a security measure
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// demoBucket is the bucket the statussink reactor writes to.
const demoBucket = "converge-demo"

// startS3 provides the S3-compatible store the classic demo's statussink
// reactor writes to: this machine's moto_server when it has one, else
// miniS3 in process. It returns the endpoint URL with demoBucket created,
// and stop, which ends what it started.
func startS3(ctx context.Context, logDir string) (endpoint string, stop func(), err error) {
	if bin, err := exec.LookPath("moto_server"); err == nil {
		endpoint, stop, err = startMoto(ctx, bin, logDir)
		if err != nil {
			return "", nil, err
		}
	} else {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", nil, fmt.Errorf("in-process S3: %w", err)
		}
		srv := &http.Server{Handler: newMiniS3(), ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ln) //nolint:errcheck // ends with Close below
		endpoint, stop = "http://"+ln.Addr().String(), func() { _ = srv.Close() }
	}
	if err := createBucket(ctx, endpoint, demoBucket); err != nil {
		stop()
		return "", nil, err
	}
	return endpoint, stop, nil
}

// startMoto runs `moto_server -H 127.0.0.1 -p PORT` and waits until it answers.
func startMoto(ctx context.Context, bin, logDir string) (string, func(), error) {
	addr, err := freeLoopback()
	if err != nil {
		return "", nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	logf, err := os.Create(filepath.Join(logDir, "moto.log"))
	if err != nil {
		return "", nil, fmt.Errorf("moto_server log: %w", err)
	}
	cmd := exec.Command(bin, "-H", "127.0.0.1", "-p", port)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return "", nil, fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(exited) }() //nolint:errcheck // stop reports nothing either
	stop := func() {
		cmd.Process.Signal(os.Interrupt) //nolint:errcheck // it may have exited already
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill() //nolint:errcheck // as above
			<-exited
		}
	}
	endpoint := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			return endpoint, stop, nil
		}
		select {
		case <-exited:
			return "", nil, fmt.Errorf("%s exited at start (see %s)", bin, logf.Name())
		case <-ctx.Done():
			stop()
			return "", nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("%s did not answer on %s within 30s (see %s)", bin, addr, logf.Name())
		}
	}
}

// createBucket creates bucket with a path-style PUT. moto and miniS3 ask for
// no signature.
func createBucket(ctx context.Context, endpoint, bucket string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, endpoint+"/"+bucket, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("create bucket %s: %w", bucket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("create bucket %s: %s: %s", bucket, resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// miniS3 is the smallest S3 statussink needs, path style: PUT and HEAD
// bucket, PUT and GET object, ListObjectsV2. Objects live in memory.
type miniS3 struct {
	mu      sync.Mutex
	buckets map[string]map[string]s3Object
}

type s3Object struct {
	data     []byte
	etag     string
	modified time.Time
}

func newMiniS3() *miniS3 { return &miniS3{buckets: map[string]map[string]s3Object{}} }

func (s *miniS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	s.mu.Lock()
	defer s.mu.Unlock()
	objs, ok := s.buckets[bucket]
	switch {
	case bucket == "":
		s3Error(w, http.StatusNotImplemented, "NotImplemented", "listing buckets is not implemented")
	case r.Method == http.MethodPut && key == "":
		if !ok {
			s.buckets[bucket] = map[string]s3Object{}
		}
	case !ok:
		s3Error(w, http.StatusNotFound, "NoSuchBucket", "the bucket "+bucket+" does not exist")
	case r.Method == http.MethodHead && key == "":
		// HeadBucket: statussink's reachability check.
	case r.Method == http.MethodPut:
		data, err := readS3Body(r)
		if err != nil {
			s3Error(w, http.StatusBadRequest, "InvalidRequest", err.Error())
			return
		}
		sum := md5.Sum(data) //nolint:gosec // see the import
		o := s3Object{data: data, etag: `"` + hex.EncodeToString(sum[:]) + `"`, modified: time.Now().UTC()}
		objs[key] = o
		w.Header().Set("ETag", o.etag)
	case r.Method == http.MethodGet && key == "":
		s.list(w, objs, r.URL.Query().Get("prefix"))
	case r.Method == http.MethodGet:
		o, ok := objs[key]
		if !ok {
			s3Error(w, http.StatusNotFound, "NoSuchKey", "no object "+key)
			return
		}
		w.Header().Set("ETag", o.etag)
		w.Header().Set("Content-Length", strconv.Itoa(len(o.data)))
		w.Write(o.data) //nolint:errcheck // the client hung up
	default:
		s3Error(w, http.StatusNotImplemented, "NotImplemented", r.Method+" is not implemented")
	}
}

func (s *miniS3) list(w http.ResponseWriter, objs map[string]s3Object, prefix string) {
	type content struct {
		Key          string `xml:"Key"`
		LastModified string `xml:"LastModified"`
		ETag         string `xml:"ETag"`
		Size         int    `xml:"Size"`
	}
	res := struct {
		XMLName     xml.Name  `xml:"http://s3.amazonaws.com/doc/2006-03-01/ ListBucketResult"`
		Prefix      string    `xml:"Prefix"`
		KeyCount    int       `xml:"KeyCount"`
		IsTruncated bool      `xml:"IsTruncated"`
		Contents    []content `xml:"Contents"`
	}{Prefix: prefix}
	for k, o := range objs {
		if strings.HasPrefix(k, prefix) {
			res.Contents = append(res.Contents, content{Key: k, LastModified: o.modified.Format(time.RFC3339), ETag: o.etag, Size: len(o.data)})
		}
	}
	sort.Slice(res.Contents, func(i, j int) bool { return res.Contents[i].Key < res.Contents[j].Key })
	res.KeyCount = len(res.Contents)
	w.Header().Set("Content-Type", "application/xml")
	io.WriteString(w, xml.Header) //nolint:errcheck // the client hung up
	xml.NewEncoder(w).Encode(res) //nolint:errcheck // as above
}

func s3Error(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, "%s<Error><Code>%s</Code><Message>%s</Message></Error>", xml.Header, code, msg)
}

// readS3Body reads an object body, decoding aws-chunked framing: the AWS
// SDKs send it for a checksum trailer (and streaming signatures).
func readS3Body(r *http.Request) ([]byte, error) {
	if !strings.Contains(r.Header.Get("Content-Encoding"), "aws-chunked") &&
		!strings.HasPrefix(r.Header.Get("X-Amz-Content-Sha256"), "STREAMING-") {
		return io.ReadAll(io.LimitReader(r.Body, 64<<20))
	}
	br := bufio.NewReader(r.Body)
	var out bytes.Buffer
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return nil, fmt.Errorf("aws-chunked: %w", err)
		}
		sizeHex, _, _ := strings.Cut(strings.TrimSpace(line), ";")
		n, err := strconv.ParseInt(sizeHex, 16, 64)
		if err != nil || n < 0 || n > 64<<20 {
			return nil, fmt.Errorf("aws-chunked: bad chunk size %q", sizeHex)
		}
		if n == 0 {
			return out.Bytes(), nil // the trailers (checksums) are not kept
		}
		if _, err := io.CopyN(&out, br, n); err != nil {
			return nil, fmt.Errorf("aws-chunked: %w", err)
		}
		if crlf, err := br.ReadString('\n'); err != nil || strings.TrimSpace(crlf) != "" {
			return nil, errors.New("aws-chunked: a chunk does not end in CRLF")
		}
	}
}
