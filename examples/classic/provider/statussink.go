package provider

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/convergeplane/converge/webhooksdk"
)

// errNoConfig is why a sink that has seen no config cannot write.
var errNoConfig = errors.New("no provider config yet")

// SinkConfig is statussink's provider config.
type SinkConfig struct {
	// Endpoint is the store's URL; empty means AWS S3 itself. Addressing is
	// path-style, which S3-compatible stores such as moto expect.
	Endpoint string `json:"endpoint"`
	Bucket   string `json:"bucket"`
	Prefix   string `json:"prefix"`
	Region   string `json:"region"`
}

// The redial schedule of an unreachable store: every redialEvery, for at most
// redialFor. Past that the sink reports ready again, so the dispatcher sends
// the next task and with it a config that may fix the endpoint: OnConfig only
// ever runs for a task, and a provider that stayed unready would never see one.
const (
	redialEvery = time.Second
	redialFor   = time.Minute
	dialTimeout = 5 * time.Second
)

// StatusSink is the statussink/1 reactor. It dials its store lazily, from the
// config the first task carries, and reports unready while that store cannot
// be reached.
type StatusSink struct {
	mu     sync.Mutex
	cfg    SinkConfig
	client *s3.Client // nil until a dial succeeded
	err    error      // why the store is unreachable, if it is
	epoch  int        // bumps on every config, ending an older redial loop
	down   bool       // the store is unreachable and a redial loop runs
}

// NewStatusSink returns a statussink with no store yet.
func NewStatusSink() *StatusSink { return &StatusSink{} }

// Kind returns statussink/1.
func (*StatusSink) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: "statussink", Version: 1}
}

// The Handler finds these hooks by type assertion: a mistyped signature would lose
// them silently.
var (
	_ webhooksdk.Readier    = (*StatusSink)(nil)
	_ webhooksdk.Configurer = (*StatusSink)(nil)
)

// Ready is false while the configured store cannot be reached (and redials).
func (s *StatusSink) Ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.down
}

// OnConfig dials the store the config names; if it cannot, the sink turns
// unready and redials in the background.
func (s *StatusSink) OnConfig(pc webhooksdk.ProviderConfig) {
	var cfg SinkConfig
	var err error
	if len(pc.Spec) > 0 {
		err = json.Unmarshal(pc.Spec, &cfg)
	}
	if err == nil && cfg.Bucket == "" {
		err = errors.New("the statussink provider config names no bucket")
	}
	s.mu.Lock()
	s.epoch++
	epoch := s.epoch
	s.cfg, s.client, s.err, s.down = cfg, nil, err, false
	s.mu.Unlock()
	if err != nil {
		// A config that cannot work is not fixed by redialing: stay
		// ready, so the task that brings a better one reaches us.
		return
	}
	if !s.dial(epoch) {
		s.mu.Lock()
		s.down = s.epoch == epoch
		s.mu.Unlock()
		go s.redial(epoch)
	}
}

// dial reaches the store of config epoch and records the client, reporting
// whether it succeeded.
func (s *StatusSink) dial(epoch int) bool {
	s.mu.Lock()
	cfg := s.cfg
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	client, err := newS3Client(ctx, cfg)
	if err == nil {
		_, err = client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(cfg.Bucket)})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.epoch != epoch {
		return true // superseded: the newer config's dial decides
	}
	if err != nil {
		s.err = fmt.Errorf("reach bucket %q at %q: %w", cfg.Bucket, cfg.Endpoint, err)
		return false
	}
	s.client, s.err, s.down = client, nil, false
	return true
}

func (s *StatusSink) redial(epoch int) {
	deadline := time.Now().Add(redialFor)
	for time.Now().Before(deadline) {
		time.Sleep(redialEvery)
		if s.dial(epoch) {
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.epoch == epoch {
		s.down = false
	}
}

func newS3Client(ctx context.Context, cfg SinkConfig) (*s3.Client, error) {
	ac, err := config.LoadDefaultConfig(ctx, config.WithRegion(cmp.Or(cfg.Region, "us-east-1")))
	if err != nil {
		return nil, fmt.Errorf("load AWS config: %w", err)
	}
	return s3.NewFromConfig(ac, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = true
		// Checksums only where S3 requires them: S3-compatible stores
		// do not all accept the trailing checksums sent by default.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
	}), nil
}

// SinkObject is the document statussink writes.
type SinkObject struct {
	Kind       string          `json:"kind"`
	Name       string          `json:"name"`
	Generation int64           `json:"generation"`
	Phase      string          `json:"phase"`
	Transition string          `json:"transition"`
	DedupToken string          `json:"dedup_token"`
	Status     json.RawMessage `json:"status,omitempty"`
}

// Work uploads the watched resource's status to <prefix>/<name>-<generation>.json.
// The key is derived from the dedup token's generation, so a redelivered event
// overwrites its own object and each generation has one.
func (s *StatusSink) Work(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	s.mu.Lock()
	client, cfg, err := s.client, s.cfg, s.err
	s.mu.Unlock()
	if client == nil {
		return webhooksdk.Outcome{}, fmt.Errorf("statussink has no store: %w", cmp.Or(err, errNoConfig))
	}
	gen := tokenGeneration(req.DedupToken, req.Generation)
	body, err := json.Marshal(SinkObject{Kind: req.Resource.Kind, Name: req.Resource.Name, Generation: gen,
		Phase: req.Resource.Phase, Transition: string(req.Transition), DedupToken: req.DedupToken, Status: req.Resource.Status})
	if err != nil {
		return webhooksdk.Outcome{}, fmt.Errorf("encode status object: %w", err)
	}
	key := SinkKey(cfg.Prefix, req.Resource.Name, gen)
	if _, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(cfg.Bucket), Key: aws.String(key),
		Body: bytes.NewReader(body), ContentType: aws.String("application/json")}); err != nil {
		return webhooksdk.Outcome{}, fmt.Errorf("put s3://%s/%s: %w", cfg.Bucket, key, err)
	}
	return webhooksdk.Outcome{SideEffectDone: true}, nil
}

// SinkKey is the object key of name's status at generation.
func SinkKey(prefix, name string, generation int64) string {
	return path.Join(prefix, fmt.Sprintf("%s-%d.json", name, generation))
}

// tokenGeneration reads the generation out of a dedup token
// (<resource-id>:<transition>:<generation>:<binding>), or returns def when
// the token does not have that shape.
func tokenGeneration(token string, def int64) int64 {
	parts := strings.Split(token, ":")
	if len(parts) != 4 {
		return def
	}
	g, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return def
	}
	return g
}
