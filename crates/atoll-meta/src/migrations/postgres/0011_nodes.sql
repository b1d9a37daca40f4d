-- The data nodes as every control-plane replica sees them: recorded at each contact, so a
-- replica starts (and places databases) the same way while a node is down. Health is the
-- last time a replica reached the node. Keep in step with ../sqlite/0011_nodes.sql.

CREATE TABLE nodes (
    name            TEXT PRIMARY KEY,
    location        TEXT NOT NULL,
    admin_url       TEXT NOT NULL,
    http_url        TEXT NOT NULL,
    hostname_suffix TEXT NOT NULL,
    registered_at   BIGINT NOT NULL,
    last_seen_at    BIGINT NOT NULL
);
