-- memory: json_pretty's output buffer (JsonString, jsonStringGrow) doubles without looking at
-- SQLITE_LIMIT_LENGTH: a 1,000-deep array indented by 100,000 spaces grows it until the
-- allocator refuses (~2 GiB). Peak memory +1,524 MiB for this one statement (a campaign
-- run); the statement then fails with "out of memory". One per SQL thread at once.
SELECT length(json_pretty(printf('%.*c', 1000, '[') || '1' || printf('%.*c', 1000, ']'), printf('%.*c', 100000, ' ')));
