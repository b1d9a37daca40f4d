-- The store's own identity. Data nodes are stamped with it on first contact and refuse
-- orders that carry another, so a control plane on an empty or wrong store can never
-- manage (let alone delete) another store's databases. One row, written by the first
-- process that asks (see Store::store_id). Keep in step with ../sqlite/0009_store_identity.sql.

CREATE TABLE store_identity (
    singleton  BIGINT PRIMARY KEY CHECK (singleton = 1),
    id         TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
