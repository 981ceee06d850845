package schema

import (
	"encoding/json"
	"testing"
)

// benchSchema is a moderate spec schema: 8 top-level properties, 6 required,
// closed objects, a $ref'd array item, patterns, enums, bounds and
// propertyNames.
const benchSchema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["image", "replicas", "resources", "ports", "region", "tier"],
  "properties": {
    "image": {"type": "string", "pattern": "^[a-z0-9./-]+:[A-Za-z0-9._-]+$", "maxLength": 255},
    "replicas": {"type": "integer", "minimum": 1, "maximum": 100},
    "region": {"type": "string", "enum": ["eu-west-1", "eu-central-1", "us-east-1", "us-west-2"]},
    "tier": {"enum": ["free", "pro", "enterprise"]},
    "resources": {
      "type": "object",
      "additionalProperties": false,
      "required": ["cpu", "memory"],
      "properties": {
        "cpu": {"type": "string", "pattern": "^[0-9]+m?$"},
        "memory": {"type": "string", "pattern": "^[0-9]+(Mi|Gi)$"},
        "gpu": {"type": "integer", "minimum": 0, "maximum": 8}
      }
    },
    "ports": {"type": "array", "maxItems": 16, "items": {"$ref": "#/$defs/port"}},
    "env": {
      "type": "array",
      "items": {
        "type": "object",
        "additionalProperties": false,
        "required": ["name", "value"],
        "properties": {
          "name": {"type": "string", "pattern": "^[A-Z_][A-Z0-9_]*$"},
          "value": {"type": "string", "maxLength": 4096}
        }
      }
    },
    "labels": {
      "type": "object",
      "propertyNames": {"pattern": "^[a-z0-9./-]+$", "maxLength": 63},
      "additionalProperties": {"type": "string", "maxLength": 63}
    }
  },
  "$defs": {
    "port": {
      "type": "object",
      "additionalProperties": false,
      "required": ["name", "port"],
      "properties": {
        "name": {"type": "string", "maxLength": 15},
        "port": {"type": "integer", "minimum": 1, "maximum": 65535},
        "protocol": {"enum": ["TCP", "UDP"]}
      }
    }
  }
}`

// benchDoc is a valid spec of about 1 KB.
const benchDoc = `{
  "image": "registry.example.com/team/web-frontend:v2.14.3",
  "replicas": 6,
  "region": "eu-west-1",
  "tier": "pro",
  "resources": {"cpu": "1500m", "memory": "2048Mi", "gpu": 0},
  "ports": [
    {"name": "http", "port": 8080, "protocol": "TCP"},
    {"name": "https", "port": 8443, "protocol": "TCP"},
    {"name": "metrics", "port": 9090, "protocol": "TCP"},
    {"name": "dns", "port": 53, "protocol": "UDP"}
  ],
  "env": [
    {"name": "LOG_LEVEL", "value": "info"},
    {"name": "LOG_FORMAT", "value": "json"},
    {"name": "UPSTREAM_URL", "value": "https://api.internal.example.com/v1"},
    {"name": "CACHE_TTL_SECONDS", "value": "300"},
    {"name": "FEATURE_FLAGS", "value": "checkout-v2,search-beta,new-nav"},
    {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel-collector:4317"}
  ],
  "labels": {
    "app": "web-frontend",
    "team": "storefront",
    "env": "production",
    "cost-center": "cc-1042",
    "app.kubernetes.io/version": "2.14.3",
    "tier": "frontend"
  }
}`

func BenchmarkValidate(b *testing.B) {
	s, err := Compile(json.RawMessage(benchSchema))
	if err != nil {
		b.Fatal(err)
	}
	doc := json.RawMessage(benchDoc)
	if err := s.Validate(doc); err != nil {
		b.Fatalf("bench document is invalid: %v", err)
	}
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Validate(doc); err != nil {
			b.Fatal(err)
		}
	}
}
