package wire

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/convergeplane/converge/webhooksdk"
)

// Callback is the callback of a task's envelope on a dispatcher whose
// callback listener is at base (no trailing slash): the task's outcome URL,
// the batched outcomes URL and the claim's token.
func Callback(base, taskID, token string) *webhooksdk.Callback {
	return &webhooksdk.Callback{URL: base + "/v1/tasks/" + taskID + "/outcome", Token: token,
		BatchURL: base + "/v1/tasks/outcomes"}
}

// PayloadURL is where the provider of a thin envelope GETs the task's
// documents (callback.Handler's GET /v1/tasks/{id}).
func PayloadURL(base, taskID string) string { return base + "/v1/tasks/" + taskID }

// AppendEnvelope appends env to buf as the dispatcher sends it: type "task",
// JSON without HTML escaping, ending in a newline. An envelope over limit
// bytes (0: no limit) is sent thin instead: without its documents, with a
// payload_url on base (docs/protocol.md §5.1).
func AppendEnvelope(buf *bytes.Buffer, env *webhooksdk.Envelope, base string, limit int) error {
	env.Type = webhooksdk.EnvelopeTask
	start := buf.Len()
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(env); err != nil {
		return fmt.Errorf("encode envelope: %w", err)
	}
	if limit > 0 && buf.Len()-start > limit {
		buf.Truncate(start)
		if err := enc.Encode(thin(*env, PayloadURL(base, env.TaskID))); err != nil {
			return fmt.Errorf("encode thin envelope: %w", err)
		}
	}
	return nil
}

// AppendBatch appends the body of a batched delivery of envs to buf
// ({"type":"batch","tasks":[…]}, docs/protocol.md §16.2), each envelope as
// AppendEnvelope writes it, thin when over an equal share of limit, so the
// batch stays within it.
func AppendBatch(buf *bytes.Buffer, envs []webhooksdk.Envelope, base string, limit int) error {
	buf.WriteString(`{"type":"batch","tasks":[`)
	for i := range envs {
		if i > 0 {
			buf.WriteByte(',')
		}
		if err := AppendEnvelope(buf, &envs[i], base, limit/len(envs)); err != nil {
			return err
		}
		buf.Truncate(buf.Len() - 1) // the encoder's newline
	}
	buf.WriteString("]}\n")
	return nil
}

// thin is env without its documents, for a target whose request limit the
// whole envelope exceeds: what stays names the task and the claim (ids,
// epoch, attempt, reaction, kind, deadline, callback, the reactor fields);
// the provider fetches the rest from payloadURL with the callback token.
func thin(env webhooksdk.Envelope, payloadURL string) *webhooksdk.Envelope {
	env.Resource, env.Status, env.Observed, env.Descendants = nil, nil, nil, nil
	env.Operation, env.Config, env.Bundle = nil, nil, nil
	env.PayloadURL = payloadURL
	return &env
}
