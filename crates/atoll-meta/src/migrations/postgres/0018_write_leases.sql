-- Failover (issue 13): until when a node's write lease runs, as granted with the answer to
-- its last heartbeat (0: it writes without one). A control plane takes a lost node's
-- databases over only a margin after this. Keep in step with ../sqlite/0018_write_leases.sql.

ALTER TABLE nodes ADD COLUMN leased_until BIGINT NOT NULL DEFAULT 0;
