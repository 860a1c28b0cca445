"""sparktap.collector"""
