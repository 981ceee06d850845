package dispatch

import "github.com/convergeplane/converge/webhooksdk"

// thin is env without its documents, for a target whose request limit the
// whole envelope exceeds: what stays names the task and the claim (ids,
// epoch, attempt, reaction, kind, deadline, callback, the reactor fields);
// the provider fetches the rest from payloadURL with the callback token
// (callback.Handler's GET /v1/tasks/{id}).
func thin(env webhooksdk.Envelope, payloadURL string) *webhooksdk.Envelope {
	env.Resource, env.Status, env.Observed, env.Descendants = nil, nil, nil, nil
	env.Operation, env.Config, env.Bundle = nil, nil, nil
	env.PayloadURL = payloadURL
	return &env
}
