-- Batched deliveries (issue #13 item 2): an endpoint's max_batch is the most
-- tasks the dispatcher sends it in one signed request ({"type":"batch"}, see
-- docs/protocol.md §16). 1, the default, is one task per request as before.
-- The upper bound is store.EndpointMaxBatchMax.

-- +goose Up
ALTER TABLE endpoints ADD COLUMN max_batch int NOT NULL DEFAULT 1
    CONSTRAINT endpoints_max_batch_range CHECK (max_batch BETWEEN 1 AND 256);

-- +goose Down
ALTER TABLE endpoints DROP COLUMN max_batch;
