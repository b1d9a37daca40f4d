//! The node admin API, for `atoll node`. (Being written.)
