"""``zabref validate``: servers' action logs checked with TLC as a behaviour of spec/Zab.tla.

Theory of operation: `actionlogs` reads every log line, `merge` orders the servers' logs into one behaviour, and
`command` hands it to TLC and reports.
"""
