"""sparktap.listener"""
