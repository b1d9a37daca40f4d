-- Nodes register themselves (issue 12): a heartbeat every few seconds says they are alive and
-- how loaded they are; a draining node takes no new databases and gives its own away; the
-- direct URL is how other nodes reach its database listener when they forward a request
-- for a database it holds. Keep in step with ../sqlite/0015_node_registration.sql.

ALTER TABLE nodes ADD COLUMN heartbeat_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN draining BIGINT NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN capacity BIGINT NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN direct_url TEXT NOT NULL DEFAULT '';
