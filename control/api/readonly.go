package api

// An apply takes an object as its GET returns it, so that `conctl get -o
// yaml > x.yaml; conctl apply -f x.yaml` works: the fields a GET returns
// that the server sets are accepted and ignored. They are listed here, per
// object type, as structs each apply body embeds beside the fields the
// apply takes; any other field is still an unknown field (400). A field
// that a GET returns and an apply does not ignore but reads (a version
// precondition, say) belongs in the apply type instead.
//
// A manifest's GET answer holds only what its apply takes. TestReadOnlyFields
// checks that every field of each GET answer is either taken by its apply
// or listed here.

// ignored is a field accepted and dropped: its value must be JSON (the
// decoder checks it) but is not kept, however large it is (a status of
// megabytes is read past, not copied).
type ignored struct{}

// UnmarshalJSON discards the value.
func (*ignored) UnmarshalJSON([]byte) error { return nil }

// resourceReadOnly are the fields of GET /resources/{kind}/{name} (a
// ResourceView) that POST /resources ignores.
type resourceReadOnly struct {
	ID                     ignored `json:"id"`
	Status                 ignored `json:"status"`
	OwnerID                ignored `json:"owner_id"`
	Generation             ignored `json:"generation"`
	SyncedGen              ignored `json:"synced_gen"`
	HealthOK               ignored `json:"health_ok"`
	FailureGen             ignored `json:"failure_gen"`
	Phase                  ignored `json:"phase"`
	LastError              ignored `json:"last_error"`
	CreatedAt              ignored `json:"created_at"`
	UpdatedAt              ignored `json:"updated_at"`
	Conditions             ignored `json:"conditions"`
	LastTask               ignored `json:"last_task"`
	Task                   ignored `json:"task"`
	Teardown               ignored `json:"teardown"`
	Parked                 ignored `json:"parked"`
	RecentFailedDeliveries ignored `json:"recent_failed_deliveries"`
	PendingReactions       ignored `json:"pending_reactions"`
}

// kindConfigReadOnly are the fields of GET .../config (a store.KindConfig)
// that PUT .../config ignores.
type kindConfigReadOnly struct {
	UpdatedAt ignored `json:"updated_at"`
}

// providerConfigReadOnly are the fields of GET /providerconfigs/{name} (a
// store.ProviderConfig) that POST /providerconfigs ignores.
type providerConfigReadOnly struct {
	OwnerID   ignored `json:"owner_id"`
	CreatedAt ignored `json:"created_at"`
	UpdatedAt ignored `json:"updated_at"`
}

// bindingReadOnly are the fields of GET /reactor-bindings/{name} (a
// store.ReactorBinding) that POST /reactor-bindings ignores.
type bindingReadOnly struct {
	CreatedAt ignored `json:"created_at"`
	UpdatedAt ignored `json:"updated_at"`
}

// endpointReadOnly are the fields of GET /endpoints/{name} (an
// EndpointView) that POST /endpoints ignores. Its secret is not among
// them: a GET never shows it, and an apply that sends one means it.
type endpointReadOnly struct {
	DisabledReason       ignored `json:"disabled_reason"`
	SecretRotationEndsAt ignored `json:"secret_rotation_ends_at"`
	CreatedAt            ignored `json:"created_at"`
	UpdatedAt            ignored `json:"updated_at"`
	Live                 ignored `json:"live"`
	RateState            ignored `json:"rate_state"`
}
