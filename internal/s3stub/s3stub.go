// Package s3stub is an in-process stand-in for the S3 API: the smallest
// part of it the demos use, path style, with objects kept in memory. The
// classic demo's statussink reactor writes to it where the machine has no
// moto_server; the data-driven demo keeps Terraform's state in it (the S3
// backend with use_lockfile), which also asks STS who it is.
package s3stub

import (
	"bufio"
	"bytes"
	"crypto/md5" //nolint:gosec // an S3 ETag is an MD5 by definition, not a security measure
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Server is the smallest S3 statussink and Terraform's S3 backend need,
// path style: PUT and HEAD bucket; PUT (If-None-Match: * refused with 412
// when the key exists, as S3's conditional write, Terraform's lock), GET,
// HEAD and DELETE object; ListObjectsV2 by prefix; and STS's
// GetCallerIdentity, posted to its root, answering a fixed demo account.
// Objects live in memory. It asks for no signature.
type Server struct {
	mu      sync.Mutex
	buckets map[string]map[string]s3Object
}

type s3Object struct {
	data     []byte
	etag     string
	modified time.Time
}

// New returns a Server with no buckets.
func New() *Server { return &Server{buckets: map[string]map[string]s3Object{}} }

// ServeHTTP answers one S3 request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	s.mu.Lock()
	defer s.mu.Unlock()
	objs, ok := s.buckets[bucket]
	switch {
	case bucket == "" && r.Method == http.MethodPost:
		callerIdentity(w, r)
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
		if _, exists := objs[key]; exists && r.Header.Get("If-None-Match") == "*" {
			s3Error(w, http.StatusPreconditionFailed, "PreconditionFailed", "the object "+key+" exists")
			return
		}
		sum := md5.Sum(data) //nolint:gosec // see the import
		o := s3Object{data: data, etag: `"` + hex.EncodeToString(sum[:]) + `"`, modified: time.Now().UTC()}
		objs[key] = o
		w.Header().Set("ETag", o.etag)
	case r.Method == http.MethodGet && key == "":
		s.list(w, objs, r.URL.Query().Get("prefix"))
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		o, ok := objs[key]
		if !ok {
			s3Error(w, http.StatusNotFound, "NoSuchKey", "no object "+key)
			return
		}
		w.Header().Set("ETag", o.etag)
		w.Header().Set("Last-Modified", o.modified.Format(http.TimeFormat))
		w.Header().Set("Content-Length", strconv.Itoa(len(o.data)))
		if r.Method == http.MethodGet {
			w.Write(o.data) //nolint:errcheck // the client hung up
		}
	case r.Method == http.MethodDelete && key != "":
		delete(objs, key) // deleting a missing key succeeds, as in S3
		w.WriteHeader(http.StatusNoContent)
	default:
		s3Error(w, http.StatusNotImplemented, "NotImplemented", r.Method+" is not implemented")
	}
}

func (s *Server) list(w http.ResponseWriter, objs map[string]s3Object, prefix string) {
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

// callerIdentity answers STS's GetCallerIdentity (a form POST to the
// root), which Terraform's S3 backend asks before using the bucket.
func callerIdentity(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || r.PostForm.Get("Action") != "GetCallerIdentity" {
		s3Error(w, http.StatusNotImplemented, "NotImplemented", "of STS only GetCallerIdentity is implemented")
		return
	}
	w.Header().Set("Content-Type", "text/xml")
	fmt.Fprintf(w, `%s<GetCallerIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><GetCallerIdentityResult>`+
		`<Arn>arn:aws:iam::%s:user/demo</Arn><UserId>AIDADEMO</UserId><Account>%s</Account>`+
		`</GetCallerIdentityResult><ResponseMetadata><RequestId>demo</RequestId></ResponseMetadata></GetCallerIdentityResponse>`,
		xml.Header, Account, Account)
}

// Account is the AWS account id the stand-in answers for.
const Account = "000000000000"

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
