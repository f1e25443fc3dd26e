"""``zabref validate``: servers' action logs checked with TLC as a behaviour of spec/Zab.tla.

Theory of operation: `actionlogs` reads every log line; `merge` orders the servers' logs into one behaviour, keeping
the spec's variables as the logs say them in a `specview.SpecView`; `command` hands the behaviour to TLC and reports.
"""
